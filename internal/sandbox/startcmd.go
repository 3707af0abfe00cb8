package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// TemplateConfig are the defaults a custom template carries (all optional).
type TemplateConfig struct {
	Env      map[string]string // environment of every process
	User     string            // default user (Dockerfile USER)
	Workdir  string            // default working directory (WORKDIR)
	CPUCount int
	MemoryMB int
	// StartCmd runs in the background (sh -c, as User in Workdir) after the
	// agent is initialised; the sandbox is handed out only once ReadyCmd
	// exits 0 (polled), or right after the start when ReadyCmd is empty.
	StartCmd string
	ReadyCmd string
	// ReadyTimeout bounds the wait for ReadyCmd; default DefaultReadyTimeout.
	ReadyTimeout time.Duration
}

// DefaultReadyTimeout is how long a template's ready command may take to
// pass.
const DefaultReadyTimeout = 60 * time.Second

// readyInterval is the pause between two ready-command attempts.
const readyInterval = 200 * time.Millisecond

func orDefault[T comparable](v, def T) T { return cmp.Or(v, def) }

// startTemplateCommand runs the template's start command and waits for its
// ready command. A sandbox whose ready command never passes is not created.
func (m *Manager) startTemplateCommand(ctx context.Context, log *slog.Logger, host, token string, tpl *Template) error {
	if tpl.StartCmd == "" {
		return nil
	}
	user := orDefault(tpl.User, DefaultUser)
	workdir := orDefault(tpl.Workdir, DefaultWorkdir)
	pc := m.agent.Process(host, token, user)
	start := time.Now()
	if err := startBackground(ctx, pc, ExecRequest{Args: []string{"/bin/sh", "-c", tpl.StartCmd}, Cwd: workdir}); err != nil {
		return userErrorf(http.StatusBadGateway, "template %s: start command failed: %v", tpl.Name, err)
	}
	if tpl.ReadyCmd == "" {
		return nil
	}
	timeout := orDefault(tpl.ReadyTimeout, DefaultReadyTimeout)
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// last keeps the output of the last attempt that finished: an attempt
	// cut short by the deadline must not wipe it from the error.
	var last, cur bytes.Buffer
	lastCode := -1
	for {
		cur.Reset()
		code, err := execOn(rctx, pc, ExecRequest{Args: []string{"/bin/sh", "-c", tpl.ReadyCmd}, Cwd: workdir}, &cur)
		if err == nil && code == 0 {
			log.Debug("template ready command passed", "elapsed", time.Since(start))
			return nil
		}
		if err == nil {
			lastCode = code
			last.Reset()
			last.Write(cur.Bytes())
		}
		select {
		case <-rctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return userErrorf(http.StatusBadGateway, "template %s: ready command %q did not pass within %s (last exit code %d, output: %q)",
				tpl.Name, tpl.ReadyCmd, timeout, lastCode, strings.TrimSpace(tail(last.String(), 500)))
		case <-time.After(readyInterval):
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
