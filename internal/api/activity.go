package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/activity"
	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// Bounds of GET /sandboxes/{id}/activity.
const (
	activityDefaultLimit = 1000
	activityMaxLimit     = 10000
	// activityHeartbeat is how often an idle stream gets a comment line.
	activityHeartbeat = 15 * time.Second
	// activityWriteTimeout is how long one write to a stream may take
	// before the client is dropped.
	activityWriteTimeout = 10 * time.Second
)

// activityRoutes registers the live activity feed (an Airlock extension).
func (a *api) activityRoutes() {
	a.mux.HandleFunc("GET /sandboxes/{id}/activity", a.activity)
}

// activity is GET /sandboxes/{id}/activity?since=&types=&limit=: the
// sandbox's activity feed, oldest first, as a JSON array, or as
// server-sent events (Accept: text/event-stream): the kept entries after
// since (or Last-Event-ID), then live ones, until the client goes away.
// It takes the API key like every control-plane route; a sandbox's access
// token does not grant it.
func (a *api) activity(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var since uint64
	sinceStr := q.Get("since")
	if sinceStr == "" {
		sinceStr = r.Header.Get("Last-Event-ID")
	}
	if sinceStr != "" {
		n, err := strconv.ParseUint(sinceStr, 10, 64)
		if err != nil {
			middleware.WriteError(w, http.StatusBadRequest, "since must be an activity entry id (a non-negative integer)")
			return
		}
		since = n
	}
	limit := activityDefaultLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > activityMaxLimit {
			middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("limit must be an integer from 1 to %d", activityMaxLimit))
			return
		}
		limit = n
	}
	var types []string
	for _, t := range strings.Split(q.Get("types"), ",") {
		if t = strings.TrimSpace(t); t != "" {
			types = append(types, t)
		}
	}
	hub := a.opts.Activity
	if hub == nil {
		middleware.WriteError(w, http.StatusNotImplemented, "the activity feed is off on this daemon (airlock serve --activity-max-entries)")
		return
	}
	sb, ok := a.live(w, r)
	if !ok {
		return
	}
	if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		middleware.WriteJSON(w, http.StatusOK, hub.Query(sb.ID(), since, types, limit))
		return
	}
	a.activityStream(w, r, hub, sb.ID(), since, types)
}

// activityStream serves the feed of sandbox id as server-sent events.
func (a *api) activityStream(w http.ResponseWriter, r *http.Request, hub *activity.Hub, id string, since uint64, types []string) {
	backlog, sub := hub.Subscribe(id, since, types)
	defer hub.Unsubscribe(sub)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	last := since
	send := func(e airlock.ActivityEntry) bool {
		b, err := json.Marshal(e)
		if err != nil {
			return false
		}
		_ = rc.SetWriteDeadline(time.Now().Add(activityWriteTimeout))
		if e.ID > 0 {
			_, err = fmt.Fprintf(w, "id: %d\ndata: %s\n\n", e.ID, b)
			last = e.ID
		} else {
			_, err = fmt.Fprintf(w, "data: %s\n\n", b)
		}
		return err == nil
	}
	flush := func() bool {
		_ = rc.SetWriteDeadline(time.Now().Add(activityWriteTimeout))
		err := rc.Flush()
		return err == nil || errors.Is(err, http.ErrNotSupported)
	}
	if _, err := fmt.Fprint(w, ": activity\n\n"); err != nil {
		return
	}
	for _, e := range backlog {
		if !send(e) {
			return
		}
	}
	if !flush() {
		return
	}
	tick := time.NewTicker(activityHeartbeat)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			_ = rc.SetWriteDeadline(time.Now().Add(activityWriteTimeout))
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil || !flush() {
				return
			}
		case e, ok := <-sub.C:
			if !ok {
				if sub.Lagged() {
					send(airlock.ActivityEntry{Time: time.Now().UTC(), Type: airlock.ActivityLagged,
						Data: map[string]any{"lastId": last, "reason": "the client read too slowly; reconnect with since=lastId"}})
					flush()
				}
				return
			}
			if !send(e) {
				return
			}
			// Send what is already queued before flushing once.
			for n := len(sub.C); n > 0; n-- {
				e, ok := <-sub.C
				if !ok {
					break // the next receive sees it closed
				}
				if !send(e) {
					return
				}
			}
			if !flush() {
				return
			}
		}
	}
}
