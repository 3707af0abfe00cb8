package api

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Sandbox logs: the daemon's lifecycle events of one sandbox
// (sandbox.Manager.Logs), in the spec's v1 and v2 shapes.

// maxLogLimit caps ?limit (and is the default).
const maxLogLimit = 1000

type logLineJSON struct {
	Timestamp time.Time `json:"timestamp"`
	Line      string    `json:"line"`
}

type logEntryJSON struct {
	Timestamp time.Time         `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

func toLogEntryJSON(e sandbox.LogEntry) logEntryJSON {
	f := e.Fields
	if f == nil {
		f = map[string]string{}
	}
	return logEntryJSON{Timestamp: e.Time, Level: e.Level, Message: e.Message, Fields: f}
}

// levelRank orders the levels for ?level (a minimum).
var levelRank = map[string]int{"debug": 0, "info": 1, "warn": 2, "error": 3}

// intParam parses an optional non-negative integer query parameter.
func intParam(r *http.Request, name string, def, max int64) (int64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > max {
		return 0, fmt.Errorf("%s must be an integer from 0 to %d", name, max)
	}
	return n, nil
}

// logsV1 is GET /sandboxes/{id}/logs?start=<unix ms>&limit=N: the first
// limit events at or after start, oldest first.
func (a *api) logsV1(w http.ResponseWriter, r *http.Request) {
	start, err := intParam(r, "start", 0, 1<<53)
	if err != nil {
		middleware.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	limit, err := intParam(r, "limit", maxLogLimit, maxLogLimit)
	if err != nil {
		middleware.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	es, err := a.m.Logs(pathID(r))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := struct {
		Logs       []logLineJSON  `json:"logs"`
		LogEntries []logEntryJSON `json:"logEntries"`
		Dropped    uint64         `json:"dropped"` // older events no longer kept
	}{Logs: []logLineJSON{}, LogEntries: []logEntryJSON{}, Dropped: a.m.LogsDropped(pathID(r))}
	for _, e := range es {
		if e.Time.UnixMilli() < start || int64(len(out.Logs)) >= limit {
			continue
		}
		out.Logs = append(out.Logs, logLineJSON{Timestamp: e.Time, Line: e.Line()})
		out.LogEntries = append(out.LogEntries, toLogEntryJSON(e))
	}
	middleware.WriteJSON(w, http.StatusOK, out)
}

// logsV2 is GET /v2/sandboxes/{id}/logs?cursor=<unix ms>&limit=N&
// direction=forward|backward&level=<min>&search=<substring>: forward
// gives events at or after cursor oldest first, backward events at or
// before cursor (default: now) newest first.
func (a *api) logsV2(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := intParam(r, "limit", maxLogLimit, maxLogLimit)
	if err != nil {
		middleware.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	dir := q.Get("direction")
	if dir == "" {
		dir = "forward"
	}
	if dir != "forward" && dir != "backward" {
		middleware.WriteError(w, http.StatusBadRequest, "direction must be forward or backward")
		return
	}
	defCursor := int64(0)
	if dir == "backward" {
		defCursor = time.Now().UnixMilli()
	}
	cursor, err := intParam(r, "cursor", defCursor, 1<<53)
	if err != nil {
		middleware.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	minLevel := 0
	if lv := strings.ToLower(q.Get("level")); lv != "" {
		rank, ok := levelRank[lv]
		if !ok {
			middleware.WriteError(w, http.StatusBadRequest, "level must be debug, info, warn or error")
			return
		}
		minLevel = rank
	}
	search := q.Get("search")
	es, err := a.m.Logs(pathID(r))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if dir == "backward" {
		slices.Reverse(es)
	}
	out := struct {
		Logs    []logEntryJSON `json:"logs"`
		Dropped uint64         `json:"dropped"` // older events no longer kept
	}{Logs: []logEntryJSON{}, Dropped: a.m.LogsDropped(pathID(r))}
	for _, e := range es {
		ms := e.Time.UnixMilli()
		if dir == "forward" && ms < cursor || dir == "backward" && ms > cursor ||
			levelRank[e.Level] < minLevel || search != "" && !strings.Contains(e.Line(), search) {
			continue
		}
		if int64(len(out.Logs)) >= limit {
			break
		}
		out.Logs = append(out.Logs, toLogEntryJSON(e))
	}
	middleware.WriteJSON(w, http.StatusOK, out)
}
