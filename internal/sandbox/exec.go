package sandbox

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/envd/gen/processpb"
	"github.com/airlock-sandbox/airlock/internal/envd/gen/processpb/processpbconnect"
)

// ExecRequest is a command run through a sandbox's agent (Process service).
type ExecRequest struct {
	Args []string          // argv; Args[0] is looked up in PATH by the agent
	User string            // Unix user; "" = the agent's default user
	Cwd  string            // working directory; "" = the user's default
	Env  map[string]string // extra environment
}

// Dir returns the runtime's private directory of sandbox id (it exists
// while the sandbox does).
func (m *Manager) Dir(id string) string { return m.sandboxDir(id) }

// basicUser sets the Basic-auth username the agent runs processes as.
type basicUser struct {
	base  http.RoundTripper
	user  string
	token string
}

func (t *basicUser) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	if t.user != "" {
		r.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(t.user+":")))
	}
	if t.token != "" {
		r.Header.Set("X-Access-Token", t.token)
	}
	return t.base.RoundTrip(r)
}

func (m *Manager) processClient(host, token, user string) processpbconnect.ProcessClient {
	base := m.cfg.HTTPClient.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc := &http.Client{Transport: &basicUser{base: base, user: user, token: token}}
	url := "http://" + net.JoinHostPort(host, strconv.Itoa(m.cfg.AgentPort))
	return processpbconnect.NewProcessClient(hc, url, connect.WithProtoJSON())
}

// agentAddr returns the guest address and access token of live sandbox id.
func (m *Manager) agentAddr(id string) (string, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.sandboxes[id]
	if !ok {
		return "", "", notFound(id)
	}
	return e.guestIP.String(), e.rec.AccessToken, nil
}

// Exec runs req in sandbox id, copies its stdout and stderr to out (may be
// nil) and returns its exit code once it ended.
func (m *Manager) Exec(ctx context.Context, id string, req ExecRequest, out io.Writer) (int, error) {
	host, token, err := m.agentAddr(id)
	if err != nil {
		return -1, err
	}
	return execOn(ctx, m.processClient(host, token, req.User), req, out)
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
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil && out != nil {
			if b := d.GetStdout(); len(b) > 0 {
				_, _ = out.Write(b)
			}
			if b := d.GetStderr(); len(b) > 0 {
				_, _ = out.Write(b)
			}
		}
		if end := ev.GetEnd(); end != nil {
			if end.Error != nil && *end.Error != "" && !end.GetExited() {
				return -1, fmt.Errorf("running %q: %s", req.Args[0], end.GetError())
			}
			return int(end.GetExitCode()), nil
		}
	}
	if err := stream.Err(); err != nil {
		return -1, fmt.Errorf("running %q: %w", req.Args[0], err)
	}
	return -1, fmt.Errorf("running %q: stream ended without an end event", req.Args[0])
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
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if ev.GetStart() != nil {
			return nil
		}
		if end := ev.GetEnd(); end != nil {
			return fmt.Errorf("start command %q ended at once (exit code %d)", req.Args[0], end.GetExitCode())
		}
	}
	if err := stream.Err(); err != nil {
		return fmt.Errorf("starting %q: %w", req.Args[0], err)
	}
	return fmt.Errorf("starting %q: stream ended without a start event", req.Args[0])
}
