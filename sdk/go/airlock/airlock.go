// Package airlock is the Go SDK for Airlock (and any E2B-compatible
// endpoint): create sandboxes and run code in their stateful interpreter,
// with the same Execution shape as E2B's code-interpreter SDKs. It is also
// the one Go client of the daemon: the E2B control-plane REST API,
// Airlock's own endpoints (templates and Dockerfile builds, snapshots,
// egress log) and a sandbox's agent (Connect RPC process and filesystem
// services plus /files) through the daemon's sandbox proxy. The airlock
// CLI is built on it.
package airlock

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock/agentwire"
)

// Ports inside every sandbox.
const (
	EnvdPort        = agentwire.EnvdPort
	InterpreterPort = agentwire.InterpreterPort
)

// Client talks to an Airlock daemon (control plane and sandbox proxy on one
// URL, as `airlock serve` provides). It is safe for concurrent use.
type Client struct {
	APIURL     string // control plane, e.g. http://127.0.0.1:49982
	SandboxURL string // sandbox traffic; defaults to APIURL
	// VolumeURL is the volume content API; defaults to $E2B_VOLUME_API_URL,
	// else APIURL.
	VolumeURL string
	APIKey    string // sent as X-API-Key
	// UserAgent is sent with control-plane requests when set.
	UserAgent string
	// HTTP is used for every request. Requests carry the caller's context;
	// the client itself has no overall timeout so streams can run long.
	HTTP *http.Client
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

// BaseURL returns the control-plane URL the client was built with.
func (c *Client) BaseURL() string { return c.APIURL }

// sandboxBase is where sandbox traffic goes (the daemon's proxy).
func (c *Client) sandboxBase() string { return firstNonEmpty(c.SandboxURL, c.APIURL) }

func ptr[T any](v T) *T { return &v }

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

// SandboxOptions configure a new sandbox.
type SandboxOptions struct {
	Template string            // default "code-interpreter-v1"
	Timeout  time.Duration     // default 5 minutes
	Metadata map[string]string // searchable labels
	Envs     map[string]string // env vars for every process
	// AllowInternet is the sandbox's outbound internet access (nil: the
	// daemon's default, allowed).
	AllowInternet *bool
	// VolumeMounts mounts volumes (by name) into the sandbox.
	VolumeMounts []VolumeMount
}

// Sandbox is a handle on a running sandbox.
type Sandbox struct {
	ID          string
	TemplateID  string
	AccessToken string
	// Info is the E2B Sandbox object the daemon answered with.
	Info SandboxInfo
	c    *Client
}

func (c *Client) handle(info SandboxInfo) *Sandbox {
	return &Sandbox{ID: info.SandboxID, TemplateID: info.TemplateID, AccessToken: info.EnvdAccessToken, Info: info, c: c}
}

// CreateSandbox starts a sandbox.
func (c *Client) CreateSandbox(ctx context.Context, o SandboxOptions) (*Sandbox, error) {
	if o.Template == "" {
		o.Template = "code-interpreter-v1"
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	body := NewSandboxBody{TemplateID: o.Template, Timeout: ptr(int64((o.Timeout + time.Second - 1) / time.Second)),
		Metadata: o.Metadata, EnvVars: o.Envs, AllowInternetAccess: o.AllowInternet}
	if len(o.VolumeMounts) > 0 {
		ms, err := mountsJSON(o.VolumeMounts)
		if err != nil {
			return nil, err
		}
		body.VolumeMounts = ms
	}
	var sb SandboxInfo
	if _, err := c.doJSON(ctx, http.MethodPost, "/v2/sandboxes", nil, body, &sb); err != nil {
		return nil, fmt.Errorf("creating sandbox: %w", err)
	}
	return c.handle(sb), nil
}

// ConnectSandbox attaches to an existing sandbox (and extends its timeout).
func (c *Client) ConnectSandbox(ctx context.Context, id string, timeout time.Duration) (*Sandbox, error) {
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	var sb SandboxInfo
	if _, err := c.doJSON(ctx, http.MethodPost, "/v2/sandboxes/"+url.PathEscape(id)+"/connect", nil,
		ConnectBody{Timeout: ptr(int64(timeout / time.Second))}, &sb); err != nil {
		return nil, err
	}
	return c.handle(sb), nil
}

// Kill stops the sandbox and deletes everything in it.
func (s *Sandbox) Kill(ctx context.Context) error {
	_, err := s.c.doJSON(ctx, http.MethodDelete, "/sandboxes/"+url.PathEscape(s.ID), nil, nil, nil)
	return err
}

// request builds a request to a port of the sandbox through the proxy.
func (s *Sandbox) request(ctx context.Context, port int, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.c.sandboxBase()+path, body)
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
