package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// DefaultURL is the daemon address used when nothing else is configured.
const DefaultURL = "http://127.0.0.1:49982"

// DefaultDataDir is the daemon's data directory when AIRLOCK_DATA_DIR is unset.
const DefaultDataDir = "/var/lib/airlock"

func init() {
	register(func(root *cobra.Command) {
		pf := root.PersistentFlags()
		pf.String("url", "", "daemon URL (default $AIRLOCK_URL, $E2B_API_URL or "+DefaultURL+")")
		pf.String("api-key", "", "API key (default $AIRLOCK_API_KEY, $E2B_API_KEY or <data-dir>/api-key)")
	})
}

// Config is the resolved client configuration of one CLI invocation.
type Config struct {
	URL       string
	APIKey    string
	KeySource string // where the key came from, for error messages
}

// resolveConfig applies the precedence flag > AIRLOCK_* > E2B_* > default
// for the URL, and flag > AIRLOCK_API_KEY > E2B_API_KEY > <data-dir>/api-key
// for the key.
func resolveConfig(cmd *cobra.Command) (Config, error) {
	var c Config
	c.URL = firstNonEmpty(flagString(cmd, "url"), os.Getenv("AIRLOCK_URL"), os.Getenv("E2B_API_URL"), DefaultURL)
	switch {
	case flagString(cmd, "api-key") != "":
		c.APIKey, c.KeySource = flagString(cmd, "api-key"), "--api-key"
	case os.Getenv("AIRLOCK_API_KEY") != "":
		c.APIKey, c.KeySource = os.Getenv("AIRLOCK_API_KEY"), "$AIRLOCK_API_KEY"
	case os.Getenv("E2B_API_KEY") != "":
		c.APIKey, c.KeySource = os.Getenv("E2B_API_KEY"), "$E2B_API_KEY"
	default:
		dir := firstNonEmpty(os.Getenv("AIRLOCK_DATA_DIR"), DefaultDataDir)
		path := filepath.Join(dir, "api-key")
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return c, fmt.Errorf("no API key: set AIRLOCK_API_KEY (or E2B_API_KEY, or --api-key), or run as a user who can read %s", path)
		}
		if err != nil {
			return c, fmt.Errorf("reading API key: %w", err)
		}
		c.APIKey, c.KeySource = strings.TrimSpace(string(b)), path
	}
	return c, nil
}

// newClient resolves the configuration and returns a client of the daemon
// (the public Go SDK) that names itself airlock-cli.
func newClient(cmd *cobra.Command) (*airlock.Client, error) {
	cfg, err := resolveConfig(cmd)
	if err != nil {
		return nil, err
	}
	c := airlock.New(cfg.URL, cfg.APIKey)
	c.UserAgent = "airlock-cli"
	return c, nil
}

func flagString(cmd *cobra.Command, name string) string {
	f := cmd.Flag(name)
	if f == nil {
		return ""
	}
	return f.Value.String()
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

// parseKV turns repeated k=v flags into a map; nil when none were given.
func parseKV(flag string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--%s %q: want key=value", flag, p)
		}
		m[k] = v
	}
	return m, nil
}

// printJSON writes v as indented JSON (the --json output of every command).
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

// isTerminal reports whether v is an *os.File attached to a terminal.
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
