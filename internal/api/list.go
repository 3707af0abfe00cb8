package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster/wire"
	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// List limits (the contract's).
const (
	defaultListLimit = wire.DefaultListLimit
	maxListLimit     = wire.MaxListLimit
)

// DecodeMetadataFilter decodes the `metadata` list filter (spec §1.3). raw is
// the query value after the usual query decoding. Both SDKs encode each key
// and value, join them as k=v&k2=v2 and encode that string once more, so the
// value is unescaped once, split on & and =, and each part unescaped again.
func DecodeMetadataFilter(raw string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(raw) == "" {
		return out, nil
	}
	joined, err := url.QueryUnescape(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid metadata filter encoding: %w", err)
	}
	for pair := range strings.SplitSeq(joined, "&") {
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("invalid metadata filter %q: want key=value", pair)
		}
		key, err := url.QueryUnescape(k)
		if err != nil {
			return nil, fmt.Errorf("invalid metadata filter key %q: %w", k, err)
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			return nil, fmt.Errorf("invalid metadata filter value %q: %w", v, err)
		}
		if key == "" {
			return nil, errors.New("invalid metadata filter: empty key")
		}
		out[key] = val
	}
	return out, nil
}

// multiValues returns a query parameter's values, accepting both repeated
// and comma-joined forms.
func multiValues(q url.Values, key string) []string {
	var out []string
	for _, v := range q[key] {
		for part := range strings.SplitSeq(v, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
}

// listQuery is a parsed GET /v2/sandboxes query.
type listQuery struct {
	states       map[string]bool
	metadata     map[string]string
	startedAfter time.Time
	template     string
	asc          bool
	limit        int
	cursor       *wire.Cursor
}

func parseListQuery(q url.Values) (*listQuery, error) {
	lq := &listQuery{states: map[string]bool{}, limit: defaultListLimit}
	for _, s := range multiValues(q, "state") {
		if s != sandbox.StateRunning && s != sandbox.StatePaused {
			return nil, fmt.Errorf("invalid state %q: want running or paused", s)
		}
		lq.states[s] = true
	}
	if len(lq.states) == 0 {
		lq.states[sandbox.StateRunning] = true
		lq.states[sandbox.StatePaused] = true
	}
	md, err := DecodeMetadataFilter(q.Get("metadata"))
	if err != nil {
		return nil, err
	}
	lq.metadata = md
	if v := q.Get("startedAfter"); v != "" {
		t, err := parseTime(v)
		if err != nil {
			return nil, err
		}
		lq.startedAfter = t
	}
	lq.template = q.Get("template")
	switch o := q.Get("order"); o {
	case "", "desc":
	case "asc":
		lq.asc = true
	default:
		return nil, fmt.Errorf("invalid order %q: want asc or desc", o)
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			return nil, fmt.Errorf("invalid limit %q: want 1..%d", v, maxListLimit)
		}
		lq.limit = n
	}
	if v := q.Get("nextToken"); v != "" {
		c, err := wire.DecodeCursor(v)
		if err != nil {
			return nil, err
		}
		lq.cursor = &c
	}
	return lq, nil
}

func (lq *listQuery) match(sb *sandbox.Sandbox) bool {
	if !lq.states[sb.State] {
		return false
	}
	if !lq.startedAfter.IsZero() && sb.StartedAt.Before(lq.startedAfter) {
		return false
	}
	if lq.template != "" && lq.template != sb.TemplateID && lq.template != sb.Alias && lq.template != sb.TemplateHash {
		return false
	}
	for k, v := range lq.metadata {
		if got, ok := sb.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// compareSandboxes orders by start time, then id.
func compareSandboxes(a, b *sandbox.Sandbox) int {
	if c := a.StartedAt.Compare(b.StartedAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// page filters, orders and paginates sbs. It returns the page and the next
// token ("" on the last page).
func (lq *listQuery) page(sbs []*sandbox.Sandbox) ([]*sandbox.Sandbox, string) {
	var out []*sandbox.Sandbox
	for _, sb := range sbs {
		if lq.match(sb) {
			out = append(out, sb)
		}
	}
	slices.SortFunc(out, func(a, b *sandbox.Sandbox) int {
		if lq.asc {
			return compareSandboxes(a, b)
		}
		return compareSandboxes(b, a)
	})
	if lq.cursor != nil {
		pos := &sandbox.Sandbox{StartedAt: lq.cursor.StartedAt, ID: lq.cursor.ID}
		i := 0
		for i < len(out) {
			c := compareSandboxes(out[i], pos)
			if (lq.asc && c > 0) || (!lq.asc && c < 0) {
				break
			}
			i++
		}
		out = out[i:]
	}
	if len(out) <= lq.limit {
		return out, ""
	}
	out = out[:lq.limit]
	last := out[len(out)-1]
	return out, wire.EncodeCursor(wire.Cursor{StartedAt: last.StartedAt, ID: last.ID, Asc: lq.asc})
}

func (a *api) listV2(w http.ResponseWriter, r *http.Request) {
	lq, err := parseListQuery(r.URL.Query())
	if err != nil {
		middleware.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	all := a.m.List()
	running := 0
	for _, sb := range all {
		if sb.State == sandbox.StateRunning {
			running++
		}
	}
	items, next := lq.page(all)
	out := make([]airlock.ListedSandbox, 0, len(items))
	for _, sb := range items {
		out = append(out, toListed(sb))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	w.Header().Set("X-Total-Running", strconv.Itoa(running))
	middleware.WriteJSON(w, http.StatusOK, out)
}

// listV1 is the legacy list: running sandboxes only, optional metadata
// filter, no pagination.
func (a *api) listV1(w http.ResponseWriter, r *http.Request) {
	md, err := DecodeMetadataFilter(r.URL.Query().Get("metadata"))
	if err != nil {
		middleware.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	lq := &listQuery{states: map[string]bool{sandbox.StateRunning: true}, metadata: md, limit: 1 << 30}
	items, _ := lq.page(a.m.List())
	out := make([]airlock.ListedSandbox, 0, len(items))
	for _, sb := range items {
		out = append(out, toListed(sb))
	}
	middleware.WriteJSON(w, http.StatusOK, out)
}

// parseTime accepts RFC 3339 times and zone-less ISO-8601 times (UTC), as
// sent by Python's datetime.isoformat().
func parseTime(v string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("invalid startedAfter %q: want an RFC 3339 time", v)
}
