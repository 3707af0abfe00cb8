// Package airlock is the Go SDK for Airlock (and any E2B-compatible
// endpoint): create sandboxes and run code in their stateful interpreter,
// with the same Execution shape as E2B's code-interpreter SDKs.
package airlock

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/guest"
)

// Ports inside every sandbox.
const (
	EnvdPort        = guest.EnvdPort
	InterpreterPort = guest.InterpreterPort
)

// Client talks to an Airlock daemon (control plane and sandbox proxy on one
// URL, as `airlock serve` provides).
type Client struct {
	APIURL     string // control plane, e.g. http://127.0.0.1:49982
	SandboxURL string // sandbox traffic; defaults to APIURL
	APIKey     string
	HTTP       *http.Client
}

// New returns a client for the daemon at apiURL.
func New(apiURL, apiKey string) *Client {
	return &Client{APIURL: strings.TrimRight(apiURL, "/"), APIKey: apiKey, HTTP: &http.Client{}}
}

// FromEnv builds a client from AIRLOCK_URL/AIRLOCK_API_KEY, falling back to
// E2B_API_URL/E2B_SANDBOX_URL/E2B_API_KEY and the local default address.
func FromEnv() *Client {
	u := firstNonEmpty(os.Getenv("AIRLOCK_URL"), os.Getenv("E2B_API_URL"), "http://127.0.0.1:49982")
	c := New(u, firstNonEmpty(os.Getenv("AIRLOCK_API_KEY"), os.Getenv("E2B_API_KEY")))
	c.SandboxURL = strings.TrimRight(os.Getenv("E2B_SANDBOX_URL"), "/")
	return c
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

// APIError is a non-2xx answer from the daemon or a sandbox.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("airlock: %d: %s", e.Status, e.Message) }

func readError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body struct {
		Message string `json:"message"`
	}
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &body) == nil && body.Message != "" {
		msg = body.Message
	}
	if msg == "" {
		msg = resp.Status
	}
	return &APIError{Status: resp.StatusCode, Message: msg}
}

func (c *Client) api(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encoding request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.APIURL+path, body)
	if err != nil {
		return fmt.Errorf("building request: %w", err)
	}
	req.Header.Set("X-API-Key", c.APIKey)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return readError(resp)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("decoding %s %s: %w", method, path, err)
		}
	}
	return nil
}

// SandboxOptions configure a new sandbox.
type SandboxOptions struct {
	Template string            // default "code-interpreter-v1"
	Timeout  time.Duration     // default 5 minutes
	Metadata map[string]string // searchable labels
	Envs     map[string]string // env vars for every process
}

// Sandbox is a handle on a running sandbox.
type Sandbox struct {
	ID          string
	TemplateID  string
	AccessToken string
	c           *Client
}

type sandboxJSON struct {
	SandboxID       string `json:"sandboxID"`
	TemplateID      string `json:"templateID"`
	EnvdAccessToken string `json:"envdAccessToken"`
}

// CreateSandbox starts a sandbox.
func (c *Client) CreateSandbox(ctx context.Context, o SandboxOptions) (*Sandbox, error) {
	if o.Template == "" {
		o.Template = "code-interpreter-v1"
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	body := map[string]any{"templateID": o.Template, "timeout": int((o.Timeout + time.Second - 1) / time.Second)}
	if o.Metadata != nil {
		body["metadata"] = o.Metadata
	}
	if o.Envs != nil {
		body["envVars"] = o.Envs
	}
	var sb sandboxJSON
	if err := c.api(ctx, http.MethodPost, "/v2/sandboxes", body, &sb); err != nil {
		return nil, err
	}
	return &Sandbox{ID: sb.SandboxID, TemplateID: sb.TemplateID, AccessToken: sb.EnvdAccessToken, c: c}, nil
}

// ConnectSandbox attaches to an existing sandbox (and extends its timeout).
func (c *Client) ConnectSandbox(ctx context.Context, id string, timeout time.Duration) (*Sandbox, error) {
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	var sb sandboxJSON
	if err := c.api(ctx, http.MethodPost, "/v2/sandboxes/"+url.PathEscape(id)+"/connect",
		map[string]any{"timeout": int(timeout / time.Second)}, &sb); err != nil {
		return nil, err
	}
	return &Sandbox{ID: sb.SandboxID, TemplateID: sb.TemplateID, AccessToken: sb.EnvdAccessToken, c: c}, nil
}

// Kill stops the sandbox and deletes everything in it.
func (s *Sandbox) Kill(ctx context.Context) error {
	return s.c.api(ctx, http.MethodDelete, "/sandboxes/"+url.PathEscape(s.ID), nil, nil)
}

// request builds a request to a port of the sandbox through the proxy.
func (s *Sandbox) request(ctx context.Context, port int, method, path string, body io.Reader) (*http.Request, error) {
	base := firstNonEmpty(s.c.SandboxURL, s.c.APIURL)
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	req.Header.Set("E2b-Sandbox-Id", s.ID)
	req.Header.Set("E2b-Sandbox-Port", fmt.Sprint(port))
	if s.AccessToken != "" {
		req.Header.Set("X-Access-Token", s.AccessToken)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}
