package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/jsonlog"
)

// Sandbox logs (GET /sandboxes/{id}/logs): the lifecycle events of each
// sandbox — created, paused, resumed, timeout changed, network policy
// changed, forked, stopped and why — taken from the manager's own log
// records. Every record at info level or above that carries a "sandbox"
// attribute is also kept, per sandbox, in a bounded list; a removed
// sandbox's list is kept until maxRetired later removals.

const (
	// maxEvents bounds one sandbox's list (oldest dropped).
	maxEvents = 1000
	// maxRetired is how many removed sandboxes keep their logs.
	maxRetired = 256
)

// LogEntry is one lifecycle event.
type LogEntry struct {
	Time    time.Time
	Level   string // debug, info, warn, error
	Message string
	Fields  map[string]string
}

// Line renders the entry as one text line ("message k=v k=v").
func (e LogEntry) Line() string {
	var b strings.Builder
	b.WriteString(e.Message)
	for _, k := range sortedKeys(e.Fields) {
		fmt.Fprintf(&b, " %s=%s", k, e.Fields[k])
	}
	return b.String()
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	for i := 1; i < len(ks); i++ { // tiny maps: insertion sort
		for j := i; j > 0 && ks[j] < ks[j-1]; j-- {
			ks[j], ks[j-1] = ks[j-1], ks[j]
		}
	}
	return ks
}

// eventLog keeps the lists, and with a store each sandbox's events on disk
// too (jsonlog "<id>.events"), read back the first time a sandbox is seen
// after a restart (eventstore.go).
type eventLog struct {
	store *jsonlog.Store // nil: memory only

	mu sync.Mutex
	// byID holds each sandbox's events, oldest first; total counts every
	// event a sandbox has had (dropped ones included); loaded marks the
	// ids whose disk log was read; retired lists removed sandboxes, oldest
	// removal first.
	byID    map[string][]LogEntry
	total   map[string]uint64
	loaded  map[string]bool
	retired []string
}

func newEventLog(store *jsonlog.Store) *eventLog {
	return &eventLog{store: store, byID: map[string][]LogEntry{}, total: map[string]uint64{}, loaded: map[string]bool{}}
}

func (l *eventLog) add(id string, e LogEntry) {
	l.load(id)
	l.mu.Lock()
	defer l.mu.Unlock()
	es := append(l.byID[id], e)
	if len(es) > maxEvents {
		es = append([]LogEntry(nil), es[len(es)-maxEvents:]...)
	}
	l.byID[id] = es
	l.total[id]++
	if l.store != nil {
		l.store.Log(eventsLogName(id)).Append(toStored(e))
	}
}

// retire marks id removed (its disk log goes); the oldest retired lists
// beyond maxRetired go.
func (l *eventLog) retire(id string) {
	if l.store != nil {
		_ = l.store.Remove(eventsLogName(id))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.retired = append(l.retired, id)
	for len(l.retired) > maxRetired {
		delete(l.byID, l.retired[0])
		delete(l.total, l.retired[0])
		delete(l.loaded, l.retired[0])
		l.retired = l.retired[1:]
	}
}

// get returns id's events and how many older ones are no longer kept.
func (l *eventLog) get(id string) ([]LogEntry, uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	es, ok := l.byID[id]
	return append([]LogEntry(nil), es...), l.total[id] - uint64(len(es)), ok
}

// handler wraps next: records go to next as before (when next wants them),
// and those at info or above with a "sandbox" attribute are also kept.
func (l *eventLog) handler(next slog.Handler) slog.Handler {
	return &eventHandler{next: next, log: l}
}

type eventHandler struct {
	next  slog.Handler
	log   *eventLog
	attrs []slog.Attr // from WithAttrs, groups flattened away
}

func (h *eventHandler) Enabled(ctx context.Context, lv slog.Level) bool {
	return lv >= slog.LevelInfo || h.next.Enabled(ctx, lv)
}

func (h *eventHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelInfo {
		h.keep(r)
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *eventHandler) keep(r slog.Record) {
	var id string
	fields := map[string]string{}
	visit := func(a slog.Attr) bool {
		switch a.Key {
		case "sandbox":
			id = a.Value.String()
		case "component":
		default:
			fields[a.Key] = a.Value.Resolve().String()
		}
		return true
	}
	for _, a := range h.attrs {
		visit(a)
	}
	r.Attrs(visit)
	if id == "" {
		return
	}
	h.log.add(id, LogEntry{Time: r.Time.UTC(), Level: levelName(r.Level), Message: r.Message, Fields: fields})
}

func (h *eventHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &eventHandler{next: h.next.WithAttrs(as), log: h.log, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *eventHandler) WithGroup(name string) slog.Handler {
	return &eventHandler{next: h.next.WithGroup(name), log: h.log, attrs: h.attrs}
}

func levelName(lv slog.Level) string {
	switch {
	case lv >= slog.LevelError:
		return "error"
	case lv >= slog.LevelWarn:
		return "warn"
	case lv >= slog.LevelInfo:
		return "info"
	}
	return "debug"
}

// Logs returns the lifecycle events of sandbox id, oldest first: of a live
// sandbox, or of one removed recently; 404 otherwise.
//
// Of a sandbox that is still here (running or paused), the process start
// and exit events its agent logged are merged in (agentlog.go).
func (m *Manager) Logs(id string) ([]LogEntry, error) {
	_, err := m.Lookup(id)
	if err == nil {
		m.events.load(id) // a sandbox re-attached after a restart
		m.events.sync(id) // what is shown is on disk
	}
	es, _, ok := m.events.get(id)
	if !ok && err != nil {
		return nil, err
	}
	if err == nil {
		es = mergeEvents(es, m.agentEvents(m.sandboxDir(id)))
	}
	if es == nil {
		es = []LogEntry{}
	}
	return es, nil
}

// eventsObserver retires a removed sandbox's events.
type eventsObserver struct{ l *eventLog }

func (eventsObserver) Created(*Sandbox, time.Duration)   {}
func (eventsObserver) CreateFailed(error, time.Duration) {}
func (o eventsObserver) Removed(id string)               { o.l.retire(id) }
func (eventsObserver) Stopped(string, string)            {}
