package airlock

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
func (c *Client) ResumeSandbox(ctx context.Context, id string, timeout int) (*SandboxInfo, error) {
	body := TimeoutBody{Timeout: ptr(int64(timeout))}
	var s SandboxInfo
	if _, err := c.doJSON(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/resume", nil, body, &s); err != nil {
		return nil, fmt.Errorf("resuming sandbox %s: %w", id, err)
	}
	return &s, nil
}

// ForkSandbox makes count copies of a running sandbox (memory and disk),
// each expiring timeout seconds from now.
func (c *Client) ForkSandbox(ctx context.Context, id string, count, timeout int) ([]ForkResult, error) {
	body := ForkBody{Count: &count, Timeout: ptr(int64(timeout))}
	var out []ForkResult
	if _, err := c.doJSON(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/fork", nil, body, &out); err != nil {
		return nil, fmt.Errorf("forking sandbox %s: %w", id, err)
	}
	return out, nil
}

// CreateSnapshot saves a running sandbox as a snapshot (name optional); the
// sandbox keeps running.
func (c *Client) CreateSnapshot(ctx context.Context, sandboxID, name string) (*Snapshot, error) {
	var body SnapshotBody
	if name != "" {
		body.Name = &name
	}
	var s Snapshot
	if _, err := c.doJSON(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(sandboxID)+"/snapshots", nil, body, &s); err != nil {
		return nil, fmt.Errorf("snapshotting sandbox %s: %w", sandboxID, err)
	}
	return &s, nil
}

// ListSnapshots returns every snapshot (optionally only those taken from
// sandboxID), following X-Next-Token.
func (c *Client) ListSnapshots(ctx context.Context, sandboxID string) ([]Snapshot, error) {
	out := []Snapshot{}
	q := url.Values{}
	if sandboxID != "" {
		q.Set("sandboxID", sandboxID)
	}
	for {
		var page []Snapshot
		hdr, err := c.doJSON(ctx, http.MethodGet, "/snapshots", q, nil, &page)
		if err != nil {
			return nil, fmt.Errorf("listing snapshots: %w", err)
		}
		out = append(out, page...)
		next := hdr.Get("X-Next-Token")
		if next == "" || len(page) == 0 {
			return out, nil
		}
		q.Set("nextToken", next)
	}
}

// DeleteSnapshot deletes a snapshot by id or name (E2B: DELETE
// /templates/{id}); an unknown one yields an *APIError with Status 404.
func (c *Client) DeleteSnapshot(ctx context.Context, ref string) error {
	if _, err := c.doJSON(ctx, http.MethodDelete, "/templates/"+url.PathEscape(ref), nil, nil, nil); err != nil {
		return fmt.Errorf("deleting snapshot %s: %w", ref, err)
	}
	return nil
}
