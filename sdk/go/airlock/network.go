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
	var out NetworkLog
	if _, err := c.doJSON(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id)+"/network/log", q, nil, &out); err != nil {
		return nil, 0, fmt.Errorf("reading the egress log of %s: %w", id, err)
	}
	return out.Entries, out.Dropped, nil
}

// UpdateNetwork replaces the egress policy of sandbox id
// (PUT /sandboxes/{id}/network); omitted fields are cleared.
func (c *Client) UpdateNetwork(ctx context.Context, id string, n NetworkUpdate) error {
	if _, err := c.doJSON(ctx, http.MethodPut, "/sandboxes/"+url.PathEscape(id)+"/network", nil, n, nil); err != nil {
		return fmt.Errorf("updating the network of %s: %w", id, err)
	}
	return nil
}
