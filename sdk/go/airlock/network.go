package airlock

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/audit"
)

// EgressLog returns the sandbox's egress audit log, oldest first: up to
// limit most recent entries (all the daemon keeps when limit <= 0), and how
// many older entries the daemon no longer keeps.
func (c *Client) EgressLog(ctx context.Context, id string, limit int) ([]audit.Entry, uint64, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Entries []audit.Entry `json:"entries"`
		Dropped uint64        `json:"dropped"`
	}
	if _, err := c.doJSON(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id)+"/network/log", q, nil, &out); err != nil {
		return nil, 0, fmt.Errorf("reading the egress log of %s: %w", id, err)
	}
	return out.Entries, out.Dropped, nil
}
