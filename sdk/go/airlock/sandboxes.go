package airlock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ListOpts filter ListSandboxes.
type ListOpts struct {
	State     []string          // "running", "paused"; empty = both
	Metadata  map[string]string // AND-matched exact values
	Limit     int               // page size (1..100); 0 = server default
	NextToken string            // cursor from a previous page
}

// ListedSandbox is one entry of GET /v2/sandboxes (E2B's ListedSandbox).
// The daemon (internal/api) encodes its answers from this type.
type ListedSandbox struct {
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias,omitempty"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata"` // {} when none
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
	// VolumeMounts is E2B's list of mounted volumes ({name, path}, and
	// Airlock's readOnly); ParseVolumeMounts reads it.
	VolumeMounts []json.RawMessage `json:"volumeMounts"`
	// ClusterNode is the node that runs the sandbox, in a cluster's lists
	// (an Airlock extension; "" from a single host and in GetSandbox).
	ClusterNode string `json:"clusterNode,omitempty"`
}

// Lifecycle is the SandboxDetail lifecycle object.
type Lifecycle struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

// SandboxNetwork is SandboxDetail.network: the egress policy the daemon
// enforces, and whether the sandbox's ports take traffic without a token.
type SandboxNetwork struct {
	AllowOut           []string `json:"allowOut,omitempty"`
	DenyOut            []string `json:"denyOut,omitempty"`
	AllowPublicTraffic bool     `json:"allowPublicTraffic"`
	MaskRequestHost    string   `json:"maskRequestHost,omitempty"`
	// Rules are network.rules as stored (placeholders, never secret values).
	Rules json.RawMessage `json:"rules,omitempty"`
	// EgressProxy is network.egressProxy without its password.
	EgressProxy *EgressProxyInfo `json:"egressProxy,omitempty"`
	// Approval is the approval hook, without its webhook secret.
	Approval *ApprovalConfig `json:"approval,omitempty"`
}

// EgressProxyInfo is a sandbox's SOCKS5 egressProxy as GET shows it: never
// the password.
type EgressProxyInfo struct {
	Address  string `json:"address"`
	Username string `json:"username,omitempty"`
}

// SandboxDetail is GET /sandboxes/{id} (E2B's SandboxDetail). The daemon
// always sends domain (null without one), allowInternetAccess, network and
// lifecycle.
type SandboxDetail struct {
	ListedSandbox
	EnvdAccessToken     string          `json:"envdAccessToken,omitempty"`
	Domain              *string         `json:"domain"`
	AllowInternetAccess *bool           `json:"allowInternetAccess"`
	Network             *SandboxNetwork `json:"network"`
	Lifecycle           *Lifecycle      `json:"lifecycle"`
}

// ListSandboxes returns one page of sandboxes (GET /v2/sandboxes) and the
// cursor of the next page ("" on the last page).
func (c *Client) ListSandboxes(ctx context.Context, o ListOpts) ([]ListedSandbox, string, error) {
	q := url.Values{}
	if len(o.State) > 0 {
		q.Set("state", strings.Join(o.State, ","))
	}
	if len(o.Metadata) > 0 {
		q.Set("metadata", EncodeMetadataFilter(o.Metadata))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.NextToken != "" {
		q.Set("nextToken", o.NextToken)
	}
	var out []ListedSandbox
	h, err := c.doJSON(ctx, http.MethodGet, "/v2/sandboxes", q, nil, &out)
	if err != nil {
		return nil, "", fmt.Errorf("listing sandboxes: %w", err)
	}
	return out, h.Get("X-Next-Token"), nil
}

// ListAllSandboxes follows pagination until the last page.
func (c *Client) ListAllSandboxes(ctx context.Context, o ListOpts) ([]ListedSandbox, error) {
	var all []ListedSandbox
	seen := map[string]bool{}
	for {
		page, next, err := c.ListSandboxes(ctx, o)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		if seen[next] {
			return nil, fmt.Errorf("listing sandboxes: server repeated cursor %q", next)
		}
		seen[next] = true
		o.NextToken = next
	}
}

// EncodeMetadataFilter encodes a metadata filter the way the E2B SDKs do:
// each key and value percent-encoded, joined as k=v&k2=v2 (the result is then
// encoded once more as the query value). Keys are sorted for stable URLs.
func EncodeMetadataFilter(m map[string]string) string {
	v := url.Values{}
	for k, val := range m {
		v.Set(k, val)
	}
	return v.Encode()
}

// GetSandbox returns a sandbox's details, including its envdAccessToken.
func (c *Client) GetSandbox(ctx context.Context, id string) (*SandboxDetail, error) {
	var d SandboxDetail
	if _, err := c.doJSON(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id), nil, nil, &d); err != nil {
		return nil, fmt.Errorf("getting sandbox %s: %w", id, err)
	}
	return &d, nil
}

// KillSandbox destroys a sandbox. An unknown id yields an *APIError with Status 404.
func (c *Client) KillSandbox(ctx context.Context, id string) error {
	if _, err := c.doJSON(ctx, http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil, nil); err != nil {
		return fmt.Errorf("killing sandbox %s: %w", id, err)
	}
	return nil
}

// SetTimeout sets a sandbox's remaining lifetime to seconds from now.
func (c *Client) SetTimeout(ctx context.Context, id string, seconds int) error {
	if _, err := c.doJSON(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/timeout", nil, TimeoutBody{Timeout: ptr(int64(seconds))}, nil); err != nil {
		return fmt.Errorf("setting timeout of sandbox %s: %w", id, err)
	}
	return nil
}

// transportError explains a failure to reach the daemon at all.
func (c *Client) transportError(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("cannot reach the airlock daemon at %s (is 'airlock serve' running? set --url or AIRLOCK_URL): %w", c.APIURL, err)
	}
	return err
}

// newRequest builds a control-plane request carrying the API key.
func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Request, error) {
	u := c.APIURL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	if c.APIKey != "" {
		req.Header.Set("X-API-Key", c.APIKey)
	}
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	return req, nil
}

// doJSON sends in (if non-nil) as JSON, checks the status and decodes the
// response into out (if non-nil). It returns the response headers.
func (c *Client) doJSON(ctx context.Context, method, path string, q url.Values, in, out any) (http.Header, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encoding request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, path, q, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, c.transportError(err)
	}
	defer resp.Body.Close()
	if err := checkResponse(resp); err != nil {
		return nil, err
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return nil, fmt.Errorf("decoding %s %s response: %w", method, path, err)
		}
	}
	return resp.Header, nil
}
