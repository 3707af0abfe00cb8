package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

// Client reaches agents directly at their guest addresses (from the host, or
// from inside a sandbox's network namespace through HTTP's dialer). It never
// follows a redirect: an agent is sandbox code, and a redirect would send
// the daemon's request (with the access token) from the host's network to
// wherever the sandbox says, past its firewall.
type Client struct {
	// HTTP sends the requests (its CheckRedirect is replaced by
	// NoRedirect); nil means http.DefaultTransport.
	HTTP *http.Client
	// Port is the agent's port; 0 means EnvdPort.
	Port int
}

// NoRedirect is the CheckRedirect of every daemon → agent client: the
// redirect response itself is returned (and treated as the error it is).
func NoRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

func (c *Client) http() *http.Client {
	var hc http.Client
	if c.HTTP != nil {
		hc = *c.HTTP
	}
	hc.CheckRedirect = NoRedirect
	return &hc
}

func (c *Client) url(host, path string) string {
	port := c.Port
	if port == 0 {
		port = EnvdPort
	}
	return URL(host, port, path)
}

// WaitHealthy polls GET /health until the agent at host answers 2xx or ctx
// ends.
func (c *Client) WaitHealthy(ctx context.Context, host string) error {
	const interval = 20 * time.Millisecond
	var lastErr error
	for {
		err := c.Health(ctx, host)
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

// Health asks the agent at host once (2 s at most) whether it is up.
func (c *Client) Health(ctx context.Context, host string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(host, PathHealth), nil)
	if err != nil {
		return fmt.Errorf("building health request: %w", err)
	}
	resp, err := c.http().Do(req)
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

// InitRequest is the body of the agent's POST /init (spec §3.5).
type InitRequest struct {
	EnvVars        map[string]string `json:"envVars,omitempty"`
	AccessToken    *string           `json:"accessToken,omitempty"`
	Timestamp      time.Time         `json:"timestamp"`
	DefaultUser    string            `json:"defaultUser,omitempty"`
	DefaultWorkdir string            `json:"defaultWorkdir,omitempty"`
	// CABundle (PEM) is installed into the guest's trust stores (E2B's
	// caBundle: the node's egress proxy CA, for sandboxes with rules).
	CABundle *string `json:"caBundle,omitempty"`
}

// Init sends POST /init to the agent at host. authToken, when not empty,
// is sent as the access token: an agent that already has a token (a forked
// copy) only accepts a re-init from its holder.
func (c *Client) Init(ctx context.Context, host string, body InitRequest, authToken string) error {
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encoding init body: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(host, PathInit), bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("building init request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if authToken != "" {
		req.Header.Set(HeaderAccessToken, authToken)
	}
	resp, err := c.http().Do(req)
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

// FreezeConflictError is the agent's 409 to POST /freeze: it cannot be
// checkpointed now (Message says why, e.g. other TCP sockets).
type FreezeConflictError struct{ Message string }

func (e *FreezeConflictError) Error() string { return "agent refused to freeze: " + e.Message }

// Freeze asks the agent at host to get ready for a checkpoint (POST
// /freeze, internal/envd/freeze): it closes its listeners and waits for its
// connections to go. A 409 is a *FreezeConflictError.
func (c *Client) Freeze(ctx context.Context, host string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(host, PathFreeze), nil)
	if err != nil {
		return fmt.Errorf("building freeze request: %w", err)
	}
	resp, err := c.http().Do(req)
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
		return &FreezeConflictError{Message: e.Message}
	default:
		return fmt.Errorf("agent freeze: status %d: %s", resp.StatusCode, bytes.TrimSpace(data))
	}
}

// RefusedError is a non-204 answer of a restored microVM's agent to the
// POST /freeze that carries the host's time (as opposed to not reaching it).
type RefusedError struct {
	Status string
	Body   string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("agent answered %s: %s", e.Status, e.Body)
}

// SetClock sends the host's time to the agent at host once (POST /freeze
// with HeaderHostTime; a no-op freeze in a microVM). An answer other than
// 204 is a *RefusedError.
func (c *Client) SetClock(ctx context.Context, host string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(host, PathFreeze), nil)
	if err != nil {
		return err
	}
	req.Header.Set(HeaderHostTime, time.Now().UTC().Format(time.RFC3339Nano))
	res, err := c.http().Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, 512))
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		return &RefusedError{Status: res.Status, Body: string(bytes.TrimSpace(body))}
	}
	return nil
}

// Readdress tells the agent of a cloned microVM, still at its parent's
// address host, to move to the address to with gateway gw (POST /freeze
// with the host's time, HeaderGuestAddr and HeaderGuestGateway).
func (c *Client) Readdress(ctx context.Context, host string, to netip.Prefix, gw string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(host, PathFreeze), nil)
	if err != nil {
		return err
	}
	req.Header.Set(HeaderHostTime, time.Now().UTC().Format(time.RFC3339Nano))
	req.Header.Set(HeaderGuestAddr, to.String())
	req.Header.Set(HeaderGuestGateway, gw)
	res, err := c.http().Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		return fmt.Errorf("agent answered %s", res.Status)
	}
	return nil
}

// authTransport adds the agent's auth headers to every request.
type authTransport struct {
	base  http.RoundTripper
	user  string
	token string
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	if t.user != "" {
		r.Header.Set("Authorization", BasicAuth(t.user))
	}
	if t.token != "" {
		r.Header.Set(HeaderAccessToken, t.token)
	}
	return t.base.RoundTrip(r)
}

// Process returns a Process service client (JSON codec, like the E2B SDKs)
// of the agent at host, authenticated with token and running processes as
// user ("" = the agent's default user).
func (c *Client) Process(host, token, user string) processpbconnect.ProcessClient {
	base := c.http().Transport
	if base == nil {
		base = http.DefaultTransport
	}
	// A sandbox's agent is not trusted: it may answer from a guest whose
	// root rewrote it. So the stream's messages are capped (the agent sends
	// at most 32 KiB of output per event) and redirects are never followed
	// from the host's network namespace (review R2-4).
	hc := &http.Client{Transport: &authTransport{base: base, user: user, token: token},
		CheckRedirect: NoRedirect}
	return processpbconnect.NewProcessClient(hc, c.url(host, ""), connect.WithProtoJSON(), connect.WithReadMaxBytes(MaxProcessMessage))
}

// MaxProcessMessage caps one Process stream message the host accepts from
// an agent.
const MaxProcessMessage = 4 << 20
