package activity

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"time"
)

// ErrNoProcessEvents, returned (wrapped) by a ProcessStream, means the
// sandbox's agent cannot give process events: the follower stops asking.
var ErrNoProcessEvents = errors.New("no process events")

// ProcessStream opens sandbox id's agent stream of process events after
// sequence number after (fromStart false: only new ones): a microVM's
// agent (guest.Client.ProcessEvents).
type ProcessStream func(ctx context.Context, id string, after uint64, fromStart bool) (io.ReadCloser, error)

// FollowTarget is a sandbox the ProcFollower should know about.
type FollowTarget struct {
	ID      string
	Running bool
	// StartedAt is when the sandbox was created: events older than it
	// in a restored agent's ring (a boot snapshot's, a fork parent's)
	// are not the sandbox's.
	StartedAt time.Time
}

// procEvent is one line of the agent's stream.
type procEvent struct {
	Seq  uint64         `json:"seq"`
	Time time.Time      `json:"time"`
	Type string         `json:"type"`
	Data map[string]any `json:"data"`
}

// ProcFollower adds the process entries of microVM sandboxes: for every
// running one it keeps one stream from the agent open (the agent reads
// the guest kernel's proc connector: no polling in the guest), and
// remembers the last sequence number it published, so a stream broken
// by a pause or a snapshot resumes where it stopped. The agent keeps the
// events in a ring meanwhile, so nothing is lost while no stream is open.
type ProcFollower struct {
	hub  *Hub
	open ProcessStream

	mu      sync.Mutex
	running map[string]context.CancelFunc
	// last is the last sequence number published per sandbox (absent:
	// none yet by this daemon).
	last map[string]uint64
	// unsupported are sandboxes whose agent has no process events.
	unsupported map[string]bool
}

// NewProcFollower returns a follower publishing to h through open.
func NewProcFollower(h *Hub, open ProcessStream) *ProcFollower {
	return &ProcFollower{hub: h, open: open, running: map[string]context.CancelFunc{}, last: map[string]uint64{},
		unsupported: map[string]bool{}}
}

// Sync starts a stream for each running target that has none, ends those
// of targets that are not running, and forgets sandboxes that are gone.
// Streams end with ctx.
func (p *ProcFollower) Sync(ctx context.Context, targets []FollowTarget) {
	if p == nil || p.hub == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := make(map[string]bool, len(targets))
	for _, t := range targets {
		seen[t.ID] = true
		_, on := p.running[t.ID]
		switch {
		case t.Running && !on && !p.unsupported[t.ID]:
			sctx, cancel := context.WithCancel(ctx)
			p.running[t.ID] = cancel
			go p.follow(sctx, t)
		case !t.Running && on:
			p.running[t.ID]()
			delete(p.running, t.ID)
		}
	}
	for id, cancel := range p.running {
		if !seen[id] {
			cancel()
			delete(p.running, id)
		}
	}
	for id := range p.last {
		if !seen[id] {
			delete(p.last, id)
		}
	}
	for id := range p.unsupported {
		if !seen[id] {
			delete(p.unsupported, id)
		}
	}
}

// follow reads one stream until it ends (the next Sync opens another).
func (p *ProcFollower) follow(ctx context.Context, t FollowTarget) {
	defer func() {
		p.mu.Lock()
		if c, ok := p.running[t.ID]; ok && ctx.Err() == nil {
			c()
			delete(p.running, t.ID)
		}
		p.mu.Unlock()
	}()
	p.mu.Lock()
	after, known := p.last[t.ID]
	p.mu.Unlock()
	// The first stream of this daemon asks for the agent's whole ring and
	// keeps what is newer than the sandbox and than the feed's newest
	// process entry (a daemon restart, a sandbox moved with its feed).
	var notBefore time.Time
	if !known {
		notBefore = t.StartedAt.Add(-time.Second)
		if last := p.hub.lastProcessTime(t.ID); last.After(notBefore) {
			notBefore = last
		}
	}
	rc, err := p.open(ctx, t.ID, after, !known)
	if err != nil {
		if errors.Is(err, ErrNoProcessEvents) {
			p.hub.opts.Log.Warn("activity feed without process entries for this sandbox", "sandbox", t.ID, "err", err)
			p.mu.Lock()
			p.unsupported[t.ID] = true
			p.mu.Unlock()
		} else if ctx.Err() == nil {
			p.hub.opts.Log.Debug("activity process stream", "sandbox", t.ID, "err", err)
		}
		return
	}
	defer rc.Close()
	go func() { <-ctx.Done(); rc.Close() }()
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	// skew is how far the guest's clock is behind the host's (its first
	// line, "clock"; an older agent sends none): event times are the
	// guest's, and both the filter below and the feed use the host's.
	var skew time.Duration
	for sc.Scan() {
		var e procEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		if e.Type == "clock" && !e.Time.IsZero() {
			skew = time.Since(e.Time)
			continue
		}
		if !strings.HasPrefix(e.Type, "process.") {
			continue
		}
		e.Time = e.Time.Add(skew)
		if known && e.Seq <= after {
			continue
		}
		after, known = e.Seq, true
		p.mu.Lock()
		p.last[t.ID] = after
		p.mu.Unlock()
		if !notBefore.IsZero() && !e.Time.After(notBefore) {
			continue
		}
		p.hub.PublishAt(t.ID, e.Time, e.Type, e.Data)
	}
}

// lastProcessTime is the time of sandbox id's newest process entry (zero:
// none).
func (h *Hub) lastProcessTime(id string) time.Time {
	f := h.feed(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.ring) - 1; i >= 0; i-- {
		if strings.HasPrefix(f.ring[i].Type, "process.") {
			return f.ring[i].Time
		}
	}
	return time.Time{}
}
