//go:build linux

// Package sudo gives sandbox users a working `sudo` on runtimes that force
// PR_SET_NO_NEW_PRIVS on every process (Debian's gVisor does: "noNewPrivileges
// ignored. PR_SET_NO_NEW_PRIVS is assumed to always be set"), where the
// setuid-root sudo binary cannot gain privileges.
//
// The agent (root, PID 1) listens on a unix socket; the agent binary, mounted
// over /usr/bin/sudo, acts as the client when invoked as "sudo". The client
// passes its argv, environment, working directory and its stdin/stdout/stderr
// descriptors (SCM_RIGHTS); the server checks the caller's credentials
// (SO_PEERCRED: root, or a member of the sudo/admin/wheel group — the
// templates give `user` passwordless sudo through that group), runs the
// command as the target user with those descriptors, forwards signals the
// client receives, and answers with the exit status.
package sudo

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

// SocketPath is where the agent listens.
const SocketPath = "/run/airlock-envd/sudo.sock"

// privilegedGroups may use sudo (as in Debian's default sudoers).
var privilegedGroups = []string{"sudo", "admin", "wheel"}

// request is the client's first message (sent together with 3 fds).
type request struct {
	Args        []string `json:"args"`
	Env         []string `json:"env"`
	Cwd         string   `json:"cwd"`
	User        string   `json:"user"`
	Login       bool     `json:"login"`
	Shell       bool     `json:"shell"`
	PreserveEnv bool     `json:"preserveEnv"`
}

// message flows after the request: signals from the client, the exit status
// (or an error) from the server.
type message struct {
	Signal int    `json:"signal,omitempty"`
	Exit   *int   `json:"exit,omitempty"`
	Error  string `json:"error,omitempty"`
}

// parseArgs turns sudo's command line into a request. It accepts the options
// scripts commonly use and ignores the ones that only concern passwords and
// credential caching.
func parseArgs(args []string) (req request, action string, err error) {
	req.User = "root"
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		if strings.HasPrefix(a, "--") {
			name, val, hasVal := strings.Cut(a[2:], "=")
			switch name {
			case "user":
				if !hasVal {
					if i+1 >= len(args) {
						return req, "", errors.New("option --user requires an argument")
					}
					i++
					val = args[i]
				}
				req.User = val
			case "login":
				req.Login = true
			case "shell":
				req.Shell = true
			case "preserve-env":
				req.PreserveEnv = true
			case "non-interactive", "set-home", "stdin", "reset-timestamp", "remove-timestamp":
			case "validate":
				action = "validate"
			case "list":
				action = "list"
			case "help":
				action = "help"
			case "version":
				action = "version"
			default:
				return req, "", fmt.Errorf("unsupported option --%s", name)
			}
			continue
		}
		// Clustered short options, e.g. -nE or -u root.
		for j := 1; j < len(a); j++ {
			switch c := a[j]; c {
			case 'u':
				val := a[j+1:]
				if val == "" {
					if i+1 >= len(args) {
						return req, "", errors.New("option -u requires an argument")
					}
					i++
					val = args[i]
				}
				req.User = val
				j = len(a)
			case 'i':
				req.Login = true
			case 's':
				req.Shell = true
			case 'E':
				req.PreserveEnv = true
			case 'n', 'H', 'S', 'k', 'K', 'b', 'P':
			case 'v':
				action = "validate"
			case 'l':
				action = "list"
			case 'h':
				action = "help"
			case 'V':
				action = "version"
			default:
				return req, "", fmt.Errorf("unsupported option -%c", c)
			}
		}
	}
	req.Args = args[i:]
	if action == "" && len(req.Args) == 0 && !req.Login && !req.Shell {
		return req, "", errors.New("usage: sudo [-u user] [-i|-s] [-E] [--] command [args...]")
	}
	return req, action, nil
}

func encode(v any) []byte {
	b, _ := json.Marshal(v)
	return append(b, '\n')
}

// ensureDir creates the socket's directory.
func ensureDir() error {
	return os.MkdirAll("/run/airlock-envd", 0o755)
}
