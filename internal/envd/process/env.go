package process

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/envd/identity"
)

// defaultPath is used when the agent itself runs without PATH.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// SystemTag is reserved for the agent's own processes; clients cannot use it.
const SystemTag = "_system"

// errBadEnv marks an environment variable that cannot be passed to execve.
var errBadEnv = errors.New("invalid environment variable")

// buildEnv assembles a child's environment in E2B's order: PATH, HOME, USER,
// LOGNAME, then the sandbox defaults (plus E2B_SANDBOX=true), then the
// request's own variables. Later entries win. Keys are sorted within each
// layer so the result is deterministic.
func buildEnv(agentPath string, u *identity.User, defaults, request map[string]string) ([]string, error) {
	if agentPath == "" {
		agentPath = defaultPath
	}
	env := []string{
		"PATH=" + agentPath,
		"HOME=" + u.Home,
		"USER=" + u.Name,
		"LOGNAME=" + u.Name,
	}
	sandbox := maps.Clone(defaults)
	if sandbox == nil {
		sandbox = map[string]string{}
	}
	sandbox["E2B_SANDBOX"] = "true"
	for _, layer := range []map[string]string{sandbox, request} {
		for _, k := range slices.Sorted(maps.Keys(layer)) {
			v := layer[k]
			if err := checkEnv(k, v); err != nil {
				return nil, err
			}
			env = append(env, k+"="+v)
		}
	}
	return env, nil
}

// checkEnv rejects names and values execve cannot represent.
func checkEnv(k, v string) error {
	switch {
	case k == "":
		return fmt.Errorf("%w: empty name", errBadEnv)
	case strings.ContainsAny(k, "=\x00"):
		return fmt.Errorf("%w: name %q contains '=' or NUL", errBadEnv, k)
	case strings.ContainsRune(v, 0):
		return fmt.Errorf("%w: value of %q contains NUL", errBadEnv, k)
	}
	return nil
}

// checkArgv rejects a command line execve cannot represent.
func checkArgv(cmd string, args []string) error {
	if cmd == "" {
		return errors.New("process.cmd is required")
	}
	if strings.ContainsRune(cmd, 0) {
		return errors.New("process.cmd contains NUL")
	}
	for i, a := range args {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("process.args[%d] contains NUL", i)
		}
	}
	return nil
}

// defaultKeepalive is used when the Keepalive-Ping-Interval header is
// missing or invalid (spec §3.2).
const defaultKeepalive = 90 * time.Second

// keepaliveInterval parses the Keepalive-Ping-Interval header (seconds).
func keepaliveInterval(h string) time.Duration {
	n, err := strconv.ParseUint(strings.TrimSpace(h), 10, 32)
	if err != nil || n == 0 {
		return defaultKeepalive
	}
	return time.Duration(n) * time.Second
}
