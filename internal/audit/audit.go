// Package audit keeps a sandbox's egress audit log: outbound connection
// attempts and DNS decisions, newest last, in a bounded ring per sandbox.
package audit

import (
	"net/netip"
	"sync"
	"time"
)

// DefaultSize is how many entries a sandbox keeps.
const DefaultSize = 1000

// Kinds of entries.
const (
	KindConn = "connection"
	KindDNS  = "dns"
)

// Decisions.
const (
	Allowed = "allowed"
	Denied  = "denied"
)

// Entry is one audited event.
type Entry struct {
	Time     time.Time `json:"timestamp"`
	Kind     string    `json:"kind"`     // KindConn or KindDNS
	Decision string    `json:"decision"` // Allowed or Denied
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

// Ring is a bounded log; the zero value is not usable (NewRing).
type Ring struct {
	mu sync.Mutex
	// buf holds the entries; next is where the next one goes; full once
	// it has wrapped.
	buf  []Entry
	next int
	full bool
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

// Book maps sandbox ids to rings.
type Book struct {
	size int
	mu   sync.Mutex
	// rings by sandbox id.
	rings map[string]*Ring
}

// NewBook returns a book whose rings hold size entries.
func NewBook(size int) *Book { return &Book{size: size, rings: map[string]*Ring{}} }

// Add records e for sandbox id.
func (b *Book) Add(id string, e Entry) {
	b.mu.Lock()
	r, ok := b.rings[id]
	if !ok {
		r = NewRing(b.size)
		b.rings[id] = r
	}
	b.mu.Unlock()
	r.Add(e)
}

// Last returns the most recent entries of id (nil when none).
func (b *Book) Last(id string, limit int) []Entry {
	b.mu.Lock()
	r := b.rings[id]
	b.mu.Unlock()
	if r == nil {
		return nil
	}
	return r.Last(limit)
}

// Drop forgets sandbox id.
func (b *Book) Drop(id string) {
	b.mu.Lock()
	delete(b.rings, id)
	b.mu.Unlock()
}
