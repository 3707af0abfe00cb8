package audit

import (
	"encoding/json"
	"sync"

	"github.com/airlock-sandbox/airlock/internal/jsonlog"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// DefaultSize is how many entries a sandbox keeps.
const DefaultSize = 1000

// Kinds of entries.
const (
	KindConn = "connection"
	KindDNS  = "dns"
	// KindPolicy notes a policy entry that has no effect (an allowOut
	// inside the operator's deny list), recorded when the policy is set.
	KindPolicy = "policy"
)

// Decisions.
const (
	Allowed = "allowed"
	Denied  = "denied"
)

// Entry is one audited event. Its JSON is the public Go SDK's
// airlock.EgressEntry (GET /sandboxes/{id}/network/log), so the type is
// that one.
type Entry = airlock.EgressEntry

// Ring is a bounded log; the zero value is not usable (NewRing).
type Ring struct {
	mu sync.Mutex
	// buf holds the entries; next is where the next one goes; full once
	// it has wrapped.
	buf  []Entry
	next int
	full bool
	// total counts every entry ever added (loaded ones included).
	total uint64
}

// NewRing returns a ring of size entries (DefaultSize when size <= 0).
func NewRing(size int) *Ring {
	if size <= 0 {
		size = DefaultSize
	}
	return &Ring{buf: make([]Entry, size)}
}

// Add appends e, dropping the oldest entry when full.
func (r *Ring) Add(e Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf[r.next] = e
	r.total++
	r.next++
	if r.next == len(r.buf) {
		r.next, r.full = 0, true
	}
}

// Last returns up to limit most recent entries, oldest first (all of them
// when limit <= 0).
func (r *Ring) Last(limit int) []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.next
	if r.full {
		n = len(r.buf)
	}
	if limit <= 0 || limit > n {
		limit = n
	}
	out := make([]Entry, 0, limit)
	for i := n - limit; i < n; i++ {
		j := i
		if r.full {
			j = (r.next + i) % len(r.buf)
		}
		out = append(out, r.buf[j])
	}
	return out
}

// Dropped is how many entries were added and are no longer kept.
func (r *Ring) Dropped() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := uint64(r.next)
	if r.full {
		n = uint64(len(r.buf))
	}
	return r.total - n
}

// Observer is told about every entry a Book records, and about every
// sandbox it forgets (the activity feed, internal/activity).
type Observer interface {
	Egress(id string, e Entry)
	Drop(id string)
}

// Book maps sandbox ids to rings.
type Book struct {
	size int
	// obs, when set, sees every Add and Drop.
	obs Observer
	// logs, when set, keeps each sandbox's entries on disk too (log
	// "<id>.egress"), read back when the sandbox is first seen again.
	logs *jsonlog.Store
	mu   sync.Mutex
	// rings by sandbox id.
	rings map[string]*Ring
}

// NewBook returns a book whose rings hold size entries. With logs, entries
// are also written to disk and a sandbox's ring starts with what its log
// holds (a restarted daemon loses nothing).
func NewBook(size int, logs *jsonlog.Store) *Book {
	return &Book{size: size, logs: logs, rings: map[string]*Ring{}}
}

// Observe makes o see every entry added from now on (set it before use).
func (b *Book) Observe(o Observer) { b.obs = o }

// LogName is the name of sandbox id's log in the store.
func LogName(id string) string { return id + ".egress" }

// ring returns id's ring, creating it (from the disk log) when missing.
// The log is read without holding b.mu: other sandboxes' entries are not
// held up by one sandbox's first read after a restart.
func (b *Book) ring(id string) *Ring {
	b.mu.Lock()
	r, ok := b.rings[id]
	b.mu.Unlock()
	if ok {
		return r
	}
	r = NewRing(b.size)
	if b.logs != nil {
		raw, total, _ := b.logs.Log(LogName(id)).Read(len(r.buf))
		for _, m := range raw {
			var e Entry
			if json.Unmarshal(m, &e) == nil {
				r.Add(e)
			}
		}
		r.total = max(total, r.total)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.rings[id]; ok {
		return old
	}
	b.rings[id] = r
	return r
}

// Add records e for sandbox id.
func (b *Book) Add(id string, e Entry) {
	b.ring(id).Add(e)
	if b.logs != nil {
		b.logs.Log(LogName(id)).Append(e)
	}
	if b.obs != nil {
		b.obs.Egress(id, e)
	}
}

// Last returns up to limit most recent entries of id, oldest first (nil
// when none). Whatever it returns is on disk already (with a store).
func (b *Book) Last(id string, limit int) []Entry {
	b.mu.Lock()
	r := b.rings[id]
	b.mu.Unlock()
	if r == nil {
		if b.logs == nil {
			return nil
		}
		r = b.ring(id)
	}
	if b.logs != nil {
		b.logs.Log(LogName(id)).Sync()
	}
	return r.Last(limit)
}

// Dropped is how many of id's entries are no longer kept (the oldest,
// beyond the ring's size).
func (b *Book) Dropped(id string) uint64 {
	b.mu.Lock()
	r := b.rings[id]
	b.mu.Unlock()
	if r == nil {
		return 0
	}
	return r.Dropped()
}

// Drop forgets sandbox id, and removes its log.
func (b *Book) Drop(id string) {
	b.mu.Lock()
	delete(b.rings, id)
	b.mu.Unlock()
	if b.logs != nil {
		_ = b.logs.Remove(LogName(id))
	}
	if b.obs != nil {
		b.obs.Drop(id)
	}
}
