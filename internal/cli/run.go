package cli

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

func init() {
	register(func(root *cobra.Command) {
		root.AddCommand(newRunCmd(), newReplCmd())
	})
}

// sdkClient builds the public Go SDK client from the CLI's connection
// settings (resolveConfig: flags, AIRLOCK_*/E2B_* env vars, the data dir's
// key); E2B_SANDBOX_URL is honoured for sandbox traffic.
func sdkClient(cmd *cobra.Command) (*airlock.Client, error) {
	cfg, err := resolveConfig(cmd)
	if err != nil {
		return nil, err
	}
	c := airlock.New(cfg.URL, cfg.APIKey)
	c.SandboxURL = strings.TrimRight(os.Getenv("E2B_SANDBOX_URL"), "/")
	return c, nil
}

type codeSession struct {
	sbx     *airlock.Sandbox
	created bool
}

func openSession(ctx context.Context, cmd *cobra.Command, sandboxID, template string, mounts []airlock.VolumeMount) (*codeSession, error) {
	c, err := sdkClient(cmd)
	if err != nil {
		return nil, err
	}
	if sandboxID != "" {
		if len(mounts) > 0 {
			return nil, errors.New("--volume mounts volumes into a new sandbox; it cannot be used with --sandbox")
		}
		sbx, err := c.ConnectSandbox(ctx, sandboxID, 0)
		if err != nil {
			return nil, fmt.Errorf("connecting to sandbox %s: %w", sandboxID, err)
		}
		return &codeSession{sbx: sbx}, nil
	}
	sbx, err := c.CreateSandbox(ctx, airlock.SandboxOptions{Template: template, VolumeMounts: mounts})
	if err != nil {
		return nil, err // "creating sandbox: ..."
	}
	return &codeSession{sbx: sbx, created: true}, nil
}

// printExecution writes logs were already streamed; it prints results and
// saves binary ones to outDir, returning the files written.
func printExecution(w io.Writer, ex *airlock.Execution, outDir string, seq *int) ([]string, error) {
	var files []string
	for _, r := range ex.Results {
		saved := false
		for _, f := range []struct{ ext, b64 string }{{"png", r.PNG}, {"jpeg", r.JPEG}, {"pdf", r.PDF}} {
			if f.b64 == "" {
				continue
			}
			raw, err := base64.StdEncoding.DecodeString(f.b64)
			if err != nil {
				return files, fmt.Errorf("decoding %s result: %w", f.ext, err)
			}
			*seq++
			p := filepath.Join(outDir, fmt.Sprintf("result-%d.%s", *seq, f.ext))
			if err := os.WriteFile(p, raw, 0o644); err != nil {
				return files, fmt.Errorf("saving result: %w", err)
			}
			files = append(files, p)
			fmt.Fprintf(w, "[saved %s result to %s]\n", f.ext, p)
			saved = true
		}
		if r.SVG != "" {
			*seq++
			p := filepath.Join(outDir, fmt.Sprintf("result-%d.svg", *seq))
			if err := os.WriteFile(p, []byte(r.SVG), 0o644); err != nil {
				return files, fmt.Errorf("saving result: %w", err)
			}
			files = append(files, p)
			fmt.Fprintf(w, "[saved svg result to %s]\n", p)
			saved = true
		}
		if r.Text != "" && (r.IsMainResult || !saved) {
			fmt.Fprintln(w, r.Text)
		}
	}
	return files, nil
}

func newRunCmd() *cobra.Command {
	var lang, sandboxID, template, outDir string
	var keep bool
	var volumes []string
	cmd := &cobra.Command{
		Use:   "run [flags] FILE|-",
		Short: "Run a code file in a sandbox's interpreter and print its output",
		Long: "Runs code in the stateful interpreter (Python by default) of a new sandbox, or of --sandbox ID.\n" +
			"Output streams as it is produced; image results are saved as files in --out-dir.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			var code []byte
			var err error
			if args[0] == "-" {
				code, err = io.ReadAll(cmd.InOrStdin())
			} else {
				code, err = os.ReadFile(args[0])
			}
			if err != nil {
				return fmt.Errorf("reading code: %w", err)
			}
			if lang == "" {
				lang = langFromExt(args[0])
			}
			mounts, err := parseVolumeFlags(volumes)
			if err != nil {
				return err
			}
			s, err := openSession(ctx, cmd, sandboxID, template, mounts)
			if err != nil {
				return err
			}
			if s.created && !keep {
				defer func() {
					kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
					defer cancel()
					_ = s.sbx.Kill(kctx)
				}()
			} else if s.created {
				fmt.Fprintln(cmd.ErrOrStderr(), "sandbox:", s.sbx.ID)
			}
			out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
			ex, err := s.sbx.RunCode(ctx, string(code), airlock.WithLanguage(lang),
				airlock.OnStdout(func(t string) { fmt.Fprint(out, t) }),
				airlock.OnStderr(func(t string) { fmt.Fprint(errw, t) }))
			if err != nil {
				return err
			}
			seq := 0
			if _, err := printExecution(out, ex, outDir, &seq); err != nil {
				return err
			}
			if ex.Error != nil {
				fmt.Fprintln(errw, ex.Error.Traceback)
				fmt.Fprintf(errw, "%s: %s\n", ex.Error.Name, ex.Error.Value)
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&lang, "lang", "", "language: python, javascript, typescript, bash (default from the file extension, else python)")
	cmd.Flags().StringVar(&sandboxID, "sandbox", "", "run in this existing sandbox instead of a new one")
	cmd.Flags().StringVar(&template, "template", "code-interpreter-v1", "template for a new sandbox")
	cmd.Flags().StringVar(&outDir, "out-dir", ".", "directory for image/PDF results")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the new sandbox running afterwards (its id is printed)")
	cmd.Flags().StringArrayVar(&volumes, "volume", nil, "mount a volume in the new sandbox: NAME:/path[:ro] (repeatable)")
	return cmd
}

func langFromExt(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".js", ".mjs", ".cjs":
		return "javascript"
	case ".ts":
		return "typescript"
	case ".sh", ".bash":
		return "bash"
	}
	return "python"
}

// cellComplete reports whether a REPL cell can run: a block opened with a
// trailing ':' (Python), '{', '(' or '\' continues until a blank line.
func cellComplete(lines []string) bool {
	if len(lines) == 0 {
		return false
	}
	last := lines[len(lines)-1]
	if len(lines) > 1 {
		return strings.TrimSpace(last) == ""
	}
	t := strings.TrimRight(last, " \t")
	return !(strings.HasSuffix(t, ":") || strings.HasSuffix(t, "\\") || strings.HasSuffix(t, "{") || strings.HasSuffix(t, "("))
}

func newReplCmd() *cobra.Command {
	var lang, sandboxID, template, outDir string
	cmd := &cobra.Command{
		Use:   "repl",
		Short: "Interactive interpreter session in a sandbox (state persists between cells)",
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, err := openSession(ctx, cmd, sandboxID, template, nil)
			if err != nil {
				return err
			}
			out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
			if s.created {
				fmt.Fprintf(errw, "sandbox %s (%s); Ctrl-D to exit and kill it\n", s.sbx.ID, lang)
				defer func() {
					kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
					defer cancel()
					_ = s.sbx.Kill(kctx)
				}()
			}
			in := bufio.NewScanner(cmd.InOrStdin())
			in.Buffer(make([]byte, 64*1024), 16<<20)
			seq := 0
			for {
				var lines []string
				fmt.Fprint(errw, ">>> ")
				for {
					if !in.Scan() {
						fmt.Fprintln(errw)
						return in.Err()
					}
					lines = append(lines, in.Text())
					if cellComplete(lines) {
						break
					}
					fmt.Fprint(errw, "... ")
				}
				code := strings.Join(lines, "\n")
				if strings.TrimSpace(code) == "" {
					continue
				}
				ex, err := s.sbx.RunCode(ctx, code, airlock.WithLanguage(lang),
					airlock.OnStdout(func(t string) { fmt.Fprint(out, t) }),
					airlock.OnStderr(func(t string) { fmt.Fprint(errw, t) }))
				if err != nil {
					if errors.Is(err, context.Canceled) {
						return nil
					}
					fmt.Fprintln(errw, "error:", err)
					continue
				}
				if _, err := printExecution(out, ex, outDir, &seq); err != nil {
					fmt.Fprintln(errw, "error:", err)
				}
				if ex.Error != nil {
					fmt.Fprintln(errw, ex.Error.Traceback)
				}
			}
		},
	}
	cmd.Flags().StringVar(&lang, "lang", "python", "language: python, javascript, typescript, bash")
	cmd.Flags().StringVar(&sandboxID, "sandbox", "", "use this existing sandbox")
	cmd.Flags().StringVar(&template, "template", "code-interpreter-v1", "template for a new sandbox")
	cmd.Flags().StringVar(&outDir, "out-dir", ".", "directory for image/PDF results")
	return cmd
}
