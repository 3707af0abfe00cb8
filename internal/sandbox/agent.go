package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"
)

// agentClient talks to the in-sandbox agent (envd) from the host.
type agentClient struct {
	http *http.Client
	port int
}

func (a *agentClient) url(host, path string) string {
	return "http://" + net.JoinHostPort(host, strconv.Itoa(a.port)) + path
}

// waitHealthy polls GET /health until the agent answers 2xx or ctx ends.
func (a *agentClient) waitHealthy(ctx context.Context, host string) error {
	const interval = 20 * time.Millisecond
	var lastErr error
	for {
		err := a.healthOnce(ctx, host)
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for agent health: %w (last error: %v)", ctx.Err(), lastErr)
		case <-time.After(interval):
		}
	}
}

func (a *agentClient) healthOnce(ctx context.Context, host string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.url(host, "/health"), nil)
	if err != nil {
		return fmt.Errorf("building health request: %w", err)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("agent health: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("agent health: status %d", resp.StatusCode)
	}
	return nil
}

// initRequest is the body of the agent's POST /init (spec §3.5).
type initRequest struct {
	EnvVars        map[string]string `json:"envVars,omitempty"`
	AccessToken    *string           `json:"accessToken,omitempty"`
	Timestamp      time.Time         `json:"timestamp"`
	DefaultUser    string            `json:"defaultUser,omitempty"`
	DefaultWorkdir string            `json:"defaultWorkdir,omitempty"`
	// authToken is sent as X-Access-Token: an agent that already has a
	// token (a forked copy) only accepts a re-init from its holder.
	authToken string
}

// newInitRequest is the /init of a freshly booted agent of sandbox id made
// from tpl: the template's environment, the sandbox's env vars and E2B's
// own variables, the template's default user and workdir, and the access
// token (none when "").
func newInitRequest(tpl *Template, envVars map[string]string, id, templateID, token string) initRequest {
	envs := maps.Clone(tpl.Env)
	if envs == nil {
		envs = map[string]string{}
	}
	maps.Copy(envs, envVars)
	envs["E2B_SANDBOX"] = "true"
	envs["E2B_SANDBOX_ID"] = id
	envs["E2B_TEMPLATE_ID"] = templateID
	body := initRequest{
		EnvVars:        envs,
		Timestamp:      time.Now().UTC(),
		DefaultUser:    orDefault(tpl.User, DefaultUser),
		DefaultWorkdir: orDefault(tpl.Workdir, DefaultWorkdir),
	}
	if token != "" {
		body.AccessToken = &token
	}
	return body
}

// init sends POST /init to the agent.
func (a *agentClient) init(ctx context.Context, host string, body initRequest) error {
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encoding init body: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url(host, "/init"), bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("building init request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if body.authToken != "" {
		req.Header.Set("X-Access-Token", body.authToken)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("agent init: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("agent init: status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}

// freezeGuest prepares the sandbox at ip for a checkpoint: it resets the
// host's connections into the guest (internal/guestconn), asks the agent to
// close its listeners and drain its connections (POST /freeze,
// internal/envd/freeze) and resets the /freeze connection too. It returns
// how many connections the first reset cut. (With gVisor 20221219 a 409
// followed when the sandbox had other TCP sockets, and the checkpoint waited
// 30 ms more for the agent to close its side: that runsc stopped a sandbox
// whose TCP endpoints were still watched by epoll. The pinned runsc saves
// such endpoints.)
func (m *Manager) freezeGuest(ctx context.Context, ip netip.Addr) (int, error) {
	aborted := m.cfg.Conns.Abort(ip)
	err := m.agent.freeze(ctx, ip.String())
	m.cfg.Conns.Abort(ip)
	return aborted, err
}

func (a *agentClient) freeze(ctx context.Context, host string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url(host, "/freeze"), nil)
	if err != nil {
		return fmt.Errorf("building freeze request: %w", err)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("agent freeze: %w", err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode == http.StatusNoContent:
		return nil
	case resp.StatusCode == http.StatusConflict:
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &e)
		return userErrorf(http.StatusConflict, "cannot pause: %s", e.Message)
	default:
		return fmt.Errorf("agent freeze: status %d: %s", resp.StatusCode, bytes.TrimSpace(data))
	}
}
