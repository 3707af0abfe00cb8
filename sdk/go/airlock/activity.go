package airlock

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Activity entry types (GET /sandboxes/{id}/activity, an Airlock
// extension).
const (
	ActivityProcessStart  = "process.start"
	ActivityProcessExit   = "process.exit"
	ActivityFileCreate    = "file.create"
	ActivityFileWrite     = "file.write"
	ActivityFileRename    = "file.rename"
	ActivityFileDelete    = "file.delete"
	ActivityEgressConnect = "egress.connect"
	ActivityEgressDNS     = "egress.dns"
	// ActivityEgressEnd is a flow that ended: Data has protocol, ip, port,
	// domain, bytesOut, bytesIn, packetsOut, packetsIn (IP-level, both
	// ways) and durationMs.
	ActivityEgressEnd = "egress.end"
	// ActivityLagged ends a stream whose client read too slowly: entries
	// after Data["lastId"] were not sent (ask again with since).
	ActivityLagged = "lagged"
)

// ActivityEntry is one entry of a sandbox's activity feed. ID grows by one
// per entry of the sandbox (from 1), across daemon restarts.
type ActivityEntry struct {
	ID   uint64         `json:"id"`
	Time time.Time      `json:"time"`
	Type string         `json:"type"`
	Data map[string]any `json:"data,omitempty"`
}

// ActivityQuery selects entries: those after Since (an entry id; 0: from
// the oldest kept), of Types (empty: all), at most Limit (0: the daemon's
// default).
type ActivityQuery struct {
	Since uint64
	Types []string
	Limit int
}

func (q ActivityQuery) values() url.Values {
	v := url.Values{}
	if q.Since > 0 {
		v.Set("since", strconv.FormatUint(q.Since, 10))
	}
	if len(q.Types) > 0 {
		v.Set("types", strings.Join(q.Types, ","))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// Activity returns the entries of sandbox id's activity feed that q
// selects, oldest first.
func (c *Client) Activity(ctx context.Context, id string, q ActivityQuery) ([]ActivityEntry, error) {
	var out []ActivityEntry
	if _, err := c.doJSON(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id)+"/activity", q.values(), nil, &out); err != nil {
		return nil, fmt.Errorf("reading the activity of sandbox %s: %w", id, err)
	}
	return out, nil
}

// WatchActivity follows sandbox id's activity feed (server-sent events):
// the kept entries after q.Since, then new ones as they happen, each given
// to fn in order. It returns when ctx ends (nil), when fn returns an error
// (that error), or when the stream ends (a "lagged" entry is given to fn
// first when the daemon dropped this client for reading too slowly).
func (c *Client) WatchActivity(ctx context.Context, id string, q ActivityQuery, fn func(ActivityEntry) error) error {
	q.Limit = 0
	req, err := c.newRequest(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id)+"/activity", q.values(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("watching the activity of sandbox %s: %w", id, c.transportError(err))
	}
	defer resp.Body.Close()
	if err := checkResponse(resp); err != nil {
		return fmt.Errorf("watching the activity of sandbox %s: %w", id, err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "data:"):
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		case line == "":
			if data.Len() == 0 {
				continue
			}
			var e ActivityEntry
			err := json.Unmarshal([]byte(data.String()), &e)
			data.Reset()
			if err != nil {
				return fmt.Errorf("decoding an activity entry: %w", err)
			}
			if err := fn(e); err != nil {
				return err
			}
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the activity stream: %w", err)
	}
	return nil
}
