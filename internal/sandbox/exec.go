package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

// ExecRequest is a command run through a sandbox's agent (Process service).
type ExecRequest struct {
	Args []string          // argv; Args[0] is looked up in PATH by the agent
	User string            // Unix user; "" = the agent's default user
	Cwd  string            // working directory; "" = the user's default
	Env  map[string]string // extra environment
}

// Dir returns the runtime's private directory of sandbox id (it exists
// while the sandbox does); the template builder's imagebuild.Sandboxes
// needs it on the manager.
func (m *Manager) Dir(id string) string { return m.sandboxDir(id) }

// Exec runs req in sandbox id (Lookup, then Live.Exec); the template
// builder's imagebuild.Sandboxes needs it on the manager.
func (m *Manager) Exec(ctx context.Context, id string, req ExecRequest, out io.Writer) (int, error) {
	e, err := m.Lookup(id)
	if err != nil {
		return -1, err
	}
	return e.Exec(ctx, req, out)
}

func processConfig(req ExecRequest) (*processpb.ProcessConfig, error) {
	if len(req.Args) == 0 || req.Args[0] == "" {
		return nil, errors.New("empty command")
	}
	pc := &processpb.ProcessConfig{Cmd: req.Args[0], Args: req.Args[1:], Envs: req.Env}
	if req.Cwd != "" {
		cwd := filepath.Clean(req.Cwd)
		pc.Cwd = &cwd
	}
	return pc, nil
}

func execOn(ctx context.Context, pc processpbconnect.ProcessClient, req ExecRequest, out io.Writer) (int, error) {
	cfg, err := processConfig(req)
	if err != nil {
		return -1, err
	}
	stream, err := pc.Start(ctx, connect.NewRequest(&processpb.StartRequest{Process: cfg}))
	if err != nil {
		return -1, fmt.Errorf("starting %q: %w", req.Args[0], err)
	}
	defer stream.Close()
	var data func(stdout, stderr, pty []byte) error
	if out != nil {
		data = func(stdout, stderr, _ []byte) error {
			if len(stdout) > 0 {
				_, _ = out.Write(stdout)
			}
			if len(stderr) > 0 {
				_, _ = out.Write(stderr)
			}
			return nil
		}
	}
	end, err := guest.Receive(stream, guest.Events{Data: data})
	switch {
	case errors.Is(err, guest.ErrNoEnd):
		return -1, fmt.Errorf("running %q: stream ended without an end event", req.Args[0])
	case err != nil:
		return -1, fmt.Errorf("running %q: %w", req.Args[0], err)
	case end.Error != nil && *end.Error != "" && !end.GetExited():
		return -1, fmt.Errorf("running %q: %s", req.Args[0], end.GetError())
	}
	return int(end.GetExitCode()), nil
}

// startBackground starts req and returns once the agent reported the
// process started; the process keeps running after the stream is closed.
func startBackground(ctx context.Context, pc processpbconnect.ProcessClient, req ExecRequest) error {
	cfg, err := processConfig(req)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := pc.Start(sctx, connect.NewRequest(&processpb.StartRequest{Process: cfg}))
	if err != nil {
		return fmt.Errorf("starting %q: %w", req.Args[0], err)
	}
	defer stream.Close()
	end, err := guest.Receive(stream, guest.Events{Start: func(uint32) error { return errStarted }})
	switch {
	case errors.Is(err, errStarted):
		return nil
	case errors.Is(err, guest.ErrNoEnd):
		return fmt.Errorf("starting %q: stream ended without a start event", req.Args[0])
	case err != nil:
		return fmt.Errorf("starting %q: %w", req.Args[0], err)
	}
	return fmt.Errorf("start command %q ended at once (exit code %d)", req.Args[0], end.GetExitCode())
}

// errStarted stops the receive loop of startBackground at the start event.
var errStarted = errors.New("started")
