package activity

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/filefeed"
	"github.com/airlock-sandbox/airlock/internal/jsonlog"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// Entry is one feed entry (the public Go SDK's type).
type Entry = airlock.ActivityEntry

// Defaults of Options.
const (
	DefaultMaxEntries = 5000
	DefaultMaxAge     = 24 * time.Hour
	// SubBuffer is how many entries a subscriber may be behind before it
	// is dropped.
	SubBuffer = 1024
)

// LogSuffix ends the name of a sandbox's log in the store.
const LogSuffix = ".activity"

// Options configure a Hub.
type Options struct {
	MaxEntries int
	MaxAge     time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	Log *slog.Logger
}

// Hub holds the feeds of every sandbox. It is safe for concurrent use.
type Hub struct {
	opts Options
	logs *jsonlog.Store

	mu    sync.Mutex
	feeds map[string]*feed
	// onListen, when set, runs while a sandbox has subscribers that want
	// file entries (SetOnListen).
	onListen func(ctx context.Context, id string)
}

// SetOnListen makes fn run (in its own goroutine) from the moment sandbox
// id gets its first subscriber whose types take file entries until the
// last such one goes; ctx ends then. The
// file watch uses it: it costs nothing while nobody listens. Set it before
// use.
func (h *Hub) SetOnListen(fn func(ctx context.Context, id string)) { h.onListen = fn }

type feed struct {
	mu sync.Mutex
	// ring holds the newest entries, oldest first (trimmed to MaxEntries
	// once it reaches twice that).
	ring []Entry
	// next is the id of the next entry.
	next uint64
	subs map[*Sub]struct{}
	// names maps an address to the domain the DNS filter last answered
	// with it (bounded by maxNames).
	names map[string]string
	// procs are the argv of the processes the tracer saw start and not
	// exit yet, by pid (bounded by maxProcs).
	procs map[int32][]string
	// stopListen ends the onListen run (nil when none runs).
	stopListen context.CancelFunc
	// files limits file entries (write coalescing, rate cap).
	files filefeed.Limiter
}

// unsubscribed ends the onListen run once f has no subscriber that wants
// file entries (f.mu held).
func (f *feed) unsubscribed() {
	if f.stopListen == nil {
		return
	}
	for s := range f.subs {
		if s.wantsFiles() {
			return
		}
	}
	f.stopListen()
	f.stopListen = nil
}

// maxNames bounds a feed's address → domain map.
const maxNames = 512

// New returns a hub that keeps its files in logs (nil: memory only).
func New(logs *jsonlog.Store, opts Options) *Hub {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Hub{opts: opts, logs: logs, feeds: map[string]*feed{}}
}

// feed returns id's feed, loading it from disk the first time.
func (h *Hub) feed(id string) *feed {
	h.mu.Lock()
	f, ok := h.feeds[id]
	h.mu.Unlock()
	if ok {
		return f
	}
	f = &feed{next: 1, subs: map[*Sub]struct{}{}}
	if h.logs != nil {
		raw, _, err := h.logs.Log(id + LogSuffix).Read(h.opts.MaxEntries)
		if err != nil {
			h.opts.Log.Warn("reading an activity log", "sandbox", id, "err", err)
		}
		for _, m := range raw {
			var e Entry
			if json.Unmarshal(m, &e) == nil && e.ID >= f.next {
				f.ring = append(f.ring, e)
				f.next = e.ID + 1
			}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.feeds[id]; ok {
		return old
	}
	h.feeds[id] = f
	return f
}

// Publish adds an entry of type typ to sandbox id's feed.
func (h *Hub) Publish(id, typ string, data map[string]any) {
	h.PublishAt(id, time.Time{}, typ, data)
}

// PublishAt is Publish with the entry's time (zero: now).
func (h *Hub) PublishAt(id string, t time.Time, typ string, data map[string]any) {
	if h == nil {
		return
	}
	if t.IsZero() {
		t = h.opts.Now()
	}
	f := h.feed(id)
	f.mu.Lock()
	e := Entry{ID: f.next, Time: t.UTC(), Type: typ, Data: data}
	f.next++
	f.ring = append(f.ring, e)
	if len(f.ring) >= 2*h.opts.MaxEntries {
		f.ring = append(f.ring[:0:0], f.ring[len(f.ring)-h.opts.MaxEntries:]...)
	}
	for s := range f.subs {
		if !s.match(e.Type) {
			continue
		}
		select {
		case s.c <- e:
		default:
			s.lagged = true
			delete(f.subs, s)
			close(s.c)
			f.unsubscribed()
		}
	}
	if h.logs != nil {
		// Under f.mu: the file's order is the ids' order.
		h.logs.Log(id + LogSuffix).Append(e)
	}
	f.mu.Unlock()
}

// Query returns the entries of sandbox id after since whose type is in
// types (all when empty), oldest first, at most limit (all when <= 0).
func (h *Hub) Query(id string, since uint64, types []string, limit int) []Entry {
	if h == nil {
		return nil
	}
	f := h.feed(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	return h.after(f, since, types, limit)
}

// after is Query with f.mu held.
func (h *Hub) after(f *feed, since uint64, types []string, limit int) []Entry {
	ring := f.ring
	if len(ring) > h.opts.MaxEntries {
		ring = ring[len(ring)-h.opts.MaxEntries:]
	}
	oldest := h.opts.Now().Add(-h.opts.MaxAge)
	i, _ := slices.BinarySearchFunc(ring, since+1, func(e Entry, id uint64) int {
		switch {
		case e.ID < id:
			return -1
		case e.ID > id:
			return 1
		}
		return 0
	})
	out := []Entry{}
	for _, e := range ring[i:] {
		if e.Time.Before(oldest) || !typeIn(e.Type, types) {
			continue
		}
		out = append(out, e)
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out
}

// typeIn reports whether typ is selected by types: empty selects all; an
// entry "process" selects "process.*".
func typeIn(typ string, types []string) bool {
	if len(types) == 0 {
		return true
	}
	for _, t := range types {
		if t == typ || strings.HasPrefix(typ, t+".") {
			return true
		}
	}
	return false
}

// Sub is a live subscription (Subscribe).
type Sub struct {
	// C delivers the entries published after the backlog; it is closed
	// by Unsubscribe, Drop, or when the subscriber fell behind (Lagged).
	C      <-chan Entry
	c      chan Entry
	types  []string
	lagged bool
	f      *feed
}

func (s *Sub) match(typ string) bool { return typeIn(typ, s.types) }

// wantsFiles reports whether s takes file entries.
func (s *Sub) wantsFiles() bool {
	if len(s.types) == 0 {
		return true
	}
	for _, t := range s.types {
		if t == "file" || strings.HasPrefix(t, "file.") {
			return true
		}
	}
	return false
}

// Lagged reports, once C is closed, whether it was closed because the
// subscriber fell behind.
func (s *Sub) Lagged() bool {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	return s.lagged
}

// Subscribe returns sandbox id's entries after since (of types) and a
// subscription to the ones that follow. Unsubscribe it when done.
func (h *Hub) Subscribe(id string, since uint64, types []string) ([]Entry, *Sub) {
	f := h.feed(id)
	c := make(chan Entry, SubBuffer)
	s := &Sub{C: c, c: c, types: types, f: f}
	f.mu.Lock()
	defer f.mu.Unlock()
	backlog := h.after(f, since, types, 0)
	f.subs[s] = struct{}{}
	if h.onListen != nil && f.stopListen == nil && s.wantsFiles() {
		ctx, cancel := context.WithCancel(context.Background())
		f.stopListen = cancel
		go h.onListen(ctx, id)
	}
	return backlog, s
}

// Unsubscribe ends s (its channel is closed if it was not yet).
func (h *Hub) Unsubscribe(s *Sub) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if _, ok := s.f.subs[s]; ok {
		delete(s.f.subs, s)
		close(s.c)
		s.f.unsubscribed()
	}
}

// Subscribers is how many live subscriptions sandbox id has.
func (h *Hub) Subscribers(id string) int {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	f := h.feeds[id]
	h.mu.Unlock()
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

// Drop forgets sandbox id: its subscriptions end and its file is removed.
func (h *Hub) Drop(id string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	f := h.feeds[id]
	delete(h.feeds, id)
	h.mu.Unlock()
	if f != nil {
		f.mu.Lock()
		for s := range f.subs {
			delete(f.subs, s)
			close(s.c)
		}
		f.unsubscribed()
		f.mu.Unlock()
	}
	if h.logs != nil {
		if err := h.logs.Remove(id + LogSuffix); err != nil {
			h.opts.Log.Warn("removing an activity log", "sandbox", id, "err", err)
		}
	}
}

// GC removes the files of sandboxes for which live is false (call it once
// the daemon has re-attached its sandboxes).
func (h *Hub) GC(live func(id string) bool) {
	if h == nil || h.logs == nil {
		return
	}
	names, err := h.logs.Names()
	if err != nil {
		h.opts.Log.Warn("listing activity logs", "err", err)
		return
	}
	for _, name := range names {
		id, ok := strings.CutSuffix(name, LogSuffix)
		if ok && live(id) {
			continue
		}
		if err := h.logs.Remove(name); err != nil {
			h.opts.Log.Warn("removing a stale activity log", "log", name, "err", err)
		}
	}
}
