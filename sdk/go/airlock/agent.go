package airlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock/agentwire"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb/filesystempbconnect"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb/processpbconnect"
)

// sandboxTransport adds the routing and auth headers of one sandbox's agent
// to every request passing through the daemon's sandbox proxy.
type sandboxTransport struct {
	base  http.RoundTripper
	id    string
	token string
}

func (t *sandboxTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set("E2b-Sandbox-Id", t.id)
	r.Header.Set("E2b-Sandbox-Port", strconv.Itoa(EnvdPort))
	if t.token != "" {
		r.Header.Set(agentwire.HeaderAccessToken, t.token)
	}
	return t.base.RoundTrip(r)
}

// agentHTTP returns an HTTP client whose requests reach sandbox id's agent.
func (c *Client) agentHTTP(id, token string) *http.Client {
	base := c.HTTP.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	return &http.Client{
		Transport: &sandboxTransport{base: base, id: id, token: token},
		Jar:       c.HTTP.Jar,
	}
}

// Process returns a Connect client (JSON codec, like the E2B SDKs) for the
// process service of sandbox id's agent; token is its envdAccessToken.
func (c *Client) Process(id, token string) processpbconnect.ProcessClient {
	return processpbconnect.NewProcessClient(c.agentHTTP(id, token), c.sandboxBase(), connect.WithProtoJSON())
}

// RunShell runs `/bin/sh -c script` as root in sandbox id, discarding its
// output, and returns its exit code once it ends.
func (c *Client) RunShell(ctx context.Context, id, token, script string) (int, error) {
	req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}})
	req.Header().Set("Authorization", agentwire.BasicAuth("root"))
	stream, err := c.Process(id, token).Start(ctx, req)
	if err != nil {
		return 0, err
	}
	defer stream.Close()
	end, err := agentwire.Receive(stream, agentwire.Events{})
	if errors.Is(err, agentwire.ErrNoEnd) {
		return 0, fmt.Errorf("the process stream of sandbox %s ended without an exit code", id)
	}
	if err != nil {
		return 0, err
	}
	return int(end.GetExitCode()), nil
}

// Filesystem returns a Connect client for the filesystem service of sandbox
// id's agent.
func (c *Client) Filesystem(id, token string) filesystempbconnect.FilesystemClient {
	return filesystempbconnect.NewFilesystemClient(c.agentHTTP(id, token), c.sandboxBase(), connect.WithProtoJSON())
}

// WriteInfo is one element of the agent's POST /files answer.
type WriteInfo struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// Upload streams r to remotePath in sandbox id (POST /files, octet-stream).
// Parent directories are created by the agent; an existing file is replaced.
func (c *Client) Upload(ctx context.Context, id, token, remotePath string, r io.Reader) (*WriteInfo, error) {
	u := c.sandboxBase() + agentwire.PathFiles + "?" + url.Values{"path": {remotePath}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, r)
	if err != nil {
		return nil, fmt.Errorf("uploading %s: %w", remotePath, err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.agentHTTP(id, token).Do(req)
	if err != nil {
		return nil, fmt.Errorf("uploading %s: %w", remotePath, err)
	}
	defer resp.Body.Close()
	if err := checkResponse(resp); err != nil {
		return nil, fmt.Errorf("uploading %s: %w", remotePath, err)
	}
	var infos []WriteInfo
	if err := json.NewDecoder(resp.Body).Decode(&infos); err != nil {
		return nil, fmt.Errorf("uploading %s: decoding response: %w", remotePath, err)
	}
	if len(infos) == 0 {
		return nil, fmt.Errorf("uploading %s: agent returned no entry", remotePath)
	}
	return &infos[0], nil
}

// Download opens remotePath in sandbox id for reading (GET /files). The
// caller must close the returned body.
func (c *Client) Download(ctx context.Context, id, token, remotePath string) (io.ReadCloser, error) {
	u := c.sandboxBase() + agentwire.PathFiles + "?" + url.Values{"path": {remotePath}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("downloading %s: %w", remotePath, err)
	}
	resp, err := c.agentHTTP(id, token).Do(req)
	if err != nil {
		return nil, fmt.Errorf("downloading %s: %w", remotePath, err)
	}
	if err := checkResponse(resp); err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("downloading %s: %w", remotePath, err)
	}
	return resp.Body, nil
}
