package airlock

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"time"
)

// EgressEntry is one event of a sandbox's egress audit log: an outbound
// connection attempt, a DNS decision, or a policy note.
type EgressEntry struct {
	Time     time.Time `json:"timestamp"`
	Kind     string    `json:"kind"`     // "connection", "dns" or "policy"
	Decision string    `json:"decision"` // "allowed" or "denied"
	// Rule names what decided: "allowOut 10.0.0.0/8", "denyOut
	// example.com", "internet", "no internet", "blocked range", ….
	Rule string `json:"rule"`
	// Connections.
	Protocol string     `json:"protocol,omitempty"` // tcp, udp, icmp, …
	Dst      netip.Addr `json:"ip,omitzero"`
	Port     uint16     `json:"port,omitempty"`
	// DNS.
	Name    string       `json:"name,omitempty"`
	QType   string       `json:"qtype,omitempty"`
	Answers []netip.Addr `json:"answers,omitempty"`
}

// EgressLog returns the sandbox's egress audit log, oldest first: up to
// limit most recent entries (all the daemon keeps when limit <= 0), and how
// many older entries the daemon no longer keeps.
func (c *Client) EgressLog(ctx context.Context, id string, limit int) ([]EgressEntry, uint64, error) {
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
