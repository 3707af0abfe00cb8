package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// PauseSandbox pauses a running sandbox (memory and disk kept). A sandbox
// that is already paused yields an *APIError with Status 409.
func (c *Client) PauseSandbox(ctx context.Context, id string) error {
	if _, err := c.doJSON(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/pause", nil, struct{}{}, nil); err != nil {
		return fmt.Errorf("pausing sandbox %s: %w", id, err)
	}
	return nil
}

// ResumeSandbox resumes a paused sandbox and makes it expire timeout seconds
// from now. A running sandbox yields an *APIError with Status 409.
func (c *Client) ResumeSandbox(ctx context.Context, id string, timeout int) (*Sandbox, error) {
	body := struct {
		Timeout int `json:"timeout"`
	}{timeout}
	var s Sandbox
	if _, err := c.doJSON(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/resume", nil, body, &s); err != nil {
		return nil, fmt.Errorf("resuming sandbox %s: %w", id, err)
	}
	return &s, nil
}

// ForkResult is one child of a fork: Sandbox or Error.
type ForkResult struct {
	Sandbox *Sandbox `json:"sandbox,omitempty"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// ForkSandbox makes count copies of a running sandbox (memory and disk),
// each expiring timeout seconds from now.
func (c *Client) ForkSandbox(ctx context.Context, id string, count, timeout int) ([]ForkResult, error) {
	body := struct {
		Count   int `json:"count"`
		Timeout int `json:"timeout"`
	}{count, timeout}
	var out []ForkResult
	if _, err := c.doJSON(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/fork", nil, body, &out); err != nil {
		return nil, fmt.Errorf("forking sandbox %s: %w", id, err)
	}
	return out, nil
}
