package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// ErrNoProcessEvents is returned by ProcessEvents when the agent cannot
// give process events (a guest kernel without CONFIG_PROC_EVENTS, an agent
// that predates them): asking again will not help.
var ErrNoProcessEvents = errors.New("the agent has no process events")

// PathProcessEvents is a microVM agent's stream of process events (the
// activity feed's process entries; the agent's internal/envd/procevents).
const PathProcessEvents = "/airlock/process-events"

// ProcessEvents opens the agent's stream of process events after sequence
// number after (fromStart false: only events from now on). The body is
// newline-delimited JSON ({seq, time, type, data}) that stays open until
// ctx ends or the connection goes; the caller closes it.
func (c *Client) ProcessEvents(ctx context.Context, host, token string, after uint64, fromStart bool) (io.ReadCloser, error) {
	u := c.url(host, PathProcessEvents)
	if fromStart || after > 0 {
		u += "?after=" + url.QueryEscape(strconv.FormatUint(after, 10))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("building process events request: %w", err)
	}
	req.Header.Set(HeaderAccessToken, token)
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent process events: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotImplemented || resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("%w: %s: %s", ErrNoProcessEvents, resp.Status, b)
		}
		return nil, fmt.Errorf("agent process events: %s: %s", resp.Status, b)
	}
	return resp.Body, nil
}
