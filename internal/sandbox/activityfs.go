package sandbox

import (
	"context"
	"io"
	"net/http"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb/filesystempbconnect"
)

// runningAgent returns the agent address and token of a running sandbox
// that no operation holds: gone is a 404, any other state a 409 user error.
func (e *Live) runningAgent() (host, token string, err error) {
	e.mu.Lock()
	state, op, gone := e.rec.State, e.op, e.gone
	e.mu.Unlock()
	if gone {
		return "", "", e.m.notFound(e.rec.ID)
	}
	if state != StateRunning || op != "" {
		return "", "", userErrorf(http.StatusConflict, "sandbox %s is not running (state %s%s)", e.rec.ID, state, op)
	}
	return e.agentAddr()
}

// FilesystemClient returns a Filesystem service client of the running
// sandbox's agent acting as root (the activity feed's file watch,
// internal/activity).
func (e *Live) FilesystemClient() (filesystempbconnect.FilesystemClient, error) {
	host, token, err := e.runningAgent()
	if err != nil {
		return nil, err
	}
	return e.m.agent.Filesystem(host, token, "root"), nil
}

// ProcessEvents opens the running microVM's agent stream of process events
// after sequence number after (internal/activity's FollowProcesses).
func (e *Live) ProcessEvents(ctx context.Context, after uint64, fromStart bool) (io.ReadCloser, error) {
	host, token, err := e.runningAgent()
	if err != nil {
		return nil, err
	}
	return e.m.agent.ProcessEvents(ctx, host, token, after, fromStart)
}
