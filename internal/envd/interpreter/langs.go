package interpreter

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/envd/identity"
)

//go:embed runner.js
var jsRunner []byte

// runAs describes who a kernel runs as and where.
type runAs struct {
	user *identity.User
	cwd  string
	env  []string // full environment
}

func (r runAs) apply(cmd *exec.Cmd) {
	cmd.Dir = r.cwd
	cmd.Env = r.env
	if r.user != nil && os.Geteuid() == 0 && r.user.UID != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{
			Uid: r.user.UID, Gid: r.user.GID, Groups: r.user.Groups,
		}}
	}
}

// writeRunner puts the embedded JS runner where the kernel user can read it.
func writeRunner(dir string) (string, error) {
	p := filepath.Join(dir, "airlock-js-runner.js")
	if err := os.WriteFile(p, jsRunner, 0o644); err != nil {
		return "", fmt.Errorf("writing js runner: %w", err)
	}
	return p, nil
}

func jsSpec(runnerPath string, ra runAs, typescript bool) procSpec {
	lang := "javascript"
	return procSpec{
		language: lang,
		command: func() *exec.Cmd {
			node, err := lookPathIn("node", ra.env)
			if err != nil {
				node = "node"
			}
			// The runner answers import() in cells through vm's
			// importModuleDynamically (--experimental-vm-modules) and resolves
			// specifiers from the context's cwd with import.meta.resolve's
			// parent argument (--experimental-import-meta-resolve).
			cmd := exec.Command(node, "--no-warnings", "--experimental-vm-modules",
				"--experimental-import-meta-resolve", runnerPath)
			ra.apply(cmd)
			cmd.Env = append(cmd.Env, "NODE_PATH=/usr/share/nodejs:/usr/lib/nodejs:/usr/local/lib/node_modules")
			return cmd
		},
		request: func(id int, code string, env map[string]string) ([]byte, error) {
			b, err := json.Marshal(map[string]any{"id": id, "code": code, "env": env, "typescript": typescript})
			if err != nil {
				return nil, fmt.Errorf("encoding request: %w", err)
			}
			return append(b, '\n'), nil
		},
		result: func(r reply) []Output {
			if !r.OK {
				return []Output{{Type: "error", ErrName: r.Name, ErrValue: r.Value, Traceback: r.Traceback}}
			}
			if r.Text != nil {
				return []Output{{Type: "result", IsMain: true, Result: map[string]any{"text": *r.Text}}}
			}
			return nil
		},
	}
}

// shellQuote quotes s for bash.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// userCellDir is a private directory below stateDir owned by the user ra
// runs as (the state directory itself belongs to root).
func userCellDir(stateDir string, ra runAs) (string, error) {
	uid, gid := os.Geteuid(), os.Getegid()
	if ra.user != nil && os.Geteuid() == 0 {
		uid, gid = int(ra.user.UID), int(ra.user.GID)
	}
	dir := filepath.Join(stateDir, fmt.Sprintf("bash-cells-%d", uid))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating cell directory: %w", err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return "", fmt.Errorf("creating cell directory: %w", err)
	}
	return dir, nil
}

func bashSpec(cellDir string, ra runAs) procSpec {
	return procSpec{
		language: "bash",
		command: func() *exec.Cmd {
			cmd := exec.Command("/bin/bash", "--login", "-s")
			ra.apply(cmd)
			return cmd
		},
		request: func(id int, code string, env map[string]string) ([]byte, error) {
			// The shell deletes each cell file after sourcing it, so the
			// files live in a directory owned by the user it runs as.
			dir, err := userCellDir(cellDir, ra)
			if err != nil {
				return nil, err
			}
			cell := filepath.Join(dir, fmt.Sprintf(".airlock-cell-%d-%d.sh", os.Getpid(), id))
			if err := os.WriteFile(cell, []byte(code+"\n"), 0o644); err != nil {
				return nil, fmt.Errorf("writing cell: %w", err)
			}
			if ra.user != nil && os.Geteuid() == 0 {
				_ = os.Chown(cell, int(ra.user.UID), int(ra.user.GID))
			}
			keys := make([]string, 0, len(env))
			for k := range env {
				if validEnvName(k) {
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			var b strings.Builder
			for i, k := range keys {
				fmt.Fprintf(&b, "if [ -n \"${%s+x}\" ]; then __al_o%d=\"$%s\"; __al_s%d=1; else __al_s%d=0; fi; export %s=%s; ",
					k, i, k, i, i, k, shellQuote(env[k]))
			}
			fmt.Fprintf(&b, "source %s </dev/null; __al_rc=$?; rm -f %s; ", shellQuote(cell), shellQuote(cell))
			for i, k := range keys {
				fmt.Fprintf(&b, "if [ $__al_s%d = 1 ]; then export %s=\"$__al_o%d\"; else unset %s; fi; unset __al_o%d __al_s%d; ", i, k, i, k, i, i)
			}
			fmt.Fprintf(&b, "printf '\\001AIRLOCK_SYNC\\001'; printf '\\001AIRLOCK_SYNC\\001' >&2; printf '{\"id\":%d,\"ok\":true,\"exit\":%%d}\\n' \"$__al_rc\" >&3\n", id)
			return []byte(b.String()), nil
		},
		result: func(r reply) []Output {
			if r.Exit != nil && *r.Exit != 0 {
				return []Output{{Type: "error", ErrName: "ExitCodeError", ErrValue: fmt.Sprintf("exit status %d", *r.Exit),
					Traceback: fmt.Sprintf("the last command exited with status %d", *r.Exit)}}
			}
			return nil
		},
	}
}

// lookPathIn finds a program on the PATH of env (the kernel's environment,
// not the agent's).
func lookPathIn(name string, env []string) (string, error) {
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in %s", name, path)
}
