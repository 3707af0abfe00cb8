package sandbox

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
)

// Sandbox events on disk (internal/jsonlog/doc.go, "Logs on disk"): each
// sandbox's lifecycle events are also appended to the jsonlog store
// (Config.Logs) as "<id>.events", read back the first time the sandbox is
// seen after a daemon restart, and removed with the sandbox. Logs of
// sandboxes that did not come back are removed at the end of Restore.

const eventsLogSuffix = ".events"

func eventsLogName(id string) string { return id + eventsLogSuffix }

// storedEvent is a LogEntry on disk.
type storedEvent struct {
	Time    time.Time         `json:"t"`
	Level   string            `json:"level"`
	Message string            `json:"msg"`
	Fields  map[string]string `json:"fields,omitempty"`
}

func toStored(e LogEntry) storedEvent {
	return storedEvent(e)
}

// load reads id's disk log once (without holding l.mu while reading); the
// events recorded since come after it.
func (l *eventLog) load(id string) {
	if l.store == nil {
		return
	}
	l.mu.Lock()
	done := l.loaded[id]
	l.mu.Unlock()
	if done {
		return
	}
	raw, total, _ := l.store.Log(eventsLogName(id)).Read(maxEvents)
	var es []LogEntry
	for _, m := range raw {
		var se storedEvent
		if json.Unmarshal(m, &se) == nil {
			es = append(es, LogEntry(se))
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.loaded[id] {
		return
	}
	l.loaded[id] = true
	// Events recorded while the log was read (none before a sandbox is
	// first seen, in practice) are on disk after the loaded ones.
	l.byID[id] = append(es, l.byID[id]...)
	if len(l.byID[id]) > maxEvents {
		l.byID[id] = append([]LogEntry(nil), l.byID[id][len(l.byID[id])-maxEvents:]...)
	}
	if total > l.total[id] {
		l.total[id] = total
	}
}

// sync writes id's queued events.
func (l *eventLog) sync(id string) {
	if l.store != nil {
		l.store.Log(eventsLogName(id)).Sync()
	}
}

// LogsDropped is how many of sandbox id's oldest events are no longer kept
// (beyond the last maxEvents).
func (m *Manager) LogsDropped(id string) uint64 {
	_, n, _ := m.events.get(id)
	return n
}

// gcLogs removes the disk logs (events and egress audit) of sandboxes that
// are not here after Restore: destroyed while the daemon was down, or
// removed by a daemon killed before it deleted their logs.
func (m *Manager) gcLogs() {
	if m.cfg.Logs == nil {
		return
	}
	names, err := m.cfg.Logs.Names()
	if err != nil {
		m.log.Warn("listing sandbox logs", "err", err)
		return
	}
	for _, name := range names {
		id, ok := strings.CutSuffix(name, eventsLogSuffix)
		if !ok {
			id, ok = strings.CutSuffix(name, audit.LogName(""))
		}
		m.mu.Lock()
		_, live := m.sandboxes[id]
		m.mu.Unlock()
		if ok && live {
			continue
		}
		if err := m.cfg.Logs.Remove(name); err != nil {
			m.log.Warn("removing a stale sandbox log", "log", name, "err", err)
		}
	}
}
