package sandbox

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"
)

// Warm pool: for templates with a boot snapshot, Config.WarmPool[name]
// sandboxes are kept restored and healthy but unclaimed (no /init yet, not
// in the store, not listed, no timer). A create claims one — /init with the
// new identity, store, register — and the pool refills in the background.
// Pooled sandboxes are destroyed at shutdown (DrainWarmPool); after a crash
// the next start destroys them as leaked (they have no store row).

// pooled is one restored, unclaimed sandbox.
type pooled struct {
	k    *child
	hash string
	boot *bootEntry
}

// poolState is the warm pool; the zero value is empty.
type poolState struct {
	// mu guards idle, closed and creates.
	mu     sync.Mutex
	idle   map[string][]*pooled // by template name
	closed bool
	kick   chan struct{} // wakes the filler (created by RunWarmPool)
	// creates are the recent creates served (or wanted) from a pooled
	// template, by name: the demand an automatic pool is sized from.
	creates map[string][]time.Time
	// filling are the restores under way for a template's pool, by name,
	// oldest first (at most poolFills at once: poolfill.go).
	filling map[string][]*poolFill
}

// demandWindow is how far back an automatic pool looks at demand.
const demandWindow = time.Minute

// DefaultAutoWarmPoolMax bounds an automatic pool.
const DefaultAutoWarmPoolMax = 4

// noteCreate records a create of template name.
func (p *poolState) noteCreate(name string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.creates == nil {
		p.creates = map[string][]time.Time{}
	}
	list := p.creates[name]
	for len(list) > 0 && now.Sub(list[0]) > demandWindow {
		list = list[1:]
	}
	p.creates[name] = append(list, now)
}

// recent counts the creates of name within demandWindow of now.
func (p *poolState) recent(name string, now time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, t := range p.creates[name] {
		if now.Sub(t) <= demandWindow {
			n++
		}
	}
	return n
}

// pooled reports whether template name has a warm pool (fixed or
// automatic).
func (m *Manager) pooled(name string) bool {
	if n, ok := m.cfg.WarmPool[name]; ok {
		return n > 0
	}
	return slices.Contains(m.cfg.AutoWarmPool, name)
}

// poolTarget is how many idle sandboxes template name's pool should hold
// now: the fixed size, or for an automatic pool one more than the creates
// of the last minute (a create every few seconds keeps a few ready), at
// most AutoWarmPoolMax.
func (m *Manager) poolTarget(name string) int {
	if n, ok := m.cfg.WarmPool[name]; ok {
		return n
	}
	if !slices.Contains(m.cfg.AutoWarmPool, name) {
		return 0
	}
	return min(1+m.pool.recent(name, time.Now()), max(m.cfg.AutoWarmPoolMax, 1))
}

// memoryFor reports whether the host can spare need more bytes and keep
// PoolMemoryReserve (always true without a memory probe).
func (m *Manager) memoryFor(need uint64) bool {
	avail, err := m.cfg.HostMemAvailable()
	if err != nil || avail < 0 {
		return true // unknown: the fixed size alone bounds the pool
	}
	return uint64(avail) >= m.cfg.PoolMemoryReserve+need
}

// pop takes an idle sandbox of template name built from hash; each is
// handed out at most once.
func (p *poolState) pop(name, hash string) *pooled {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[name]
	for i, s := range list {
		if s.hash == hash {
			p.idle[name] = append(list[:i:i], list[i+1:]...)
			return s
		}
	}
	return nil
}

func (p *poolState) wake() {
	p.mu.Lock()
	kick := p.kick
	p.mu.Unlock()
	if kick != nil {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
}

// WarmPoolSizes reports the idle pooled sandboxes per template.
func (m *Manager) WarmPoolSizes() map[string]int {
	m.pool.mu.Lock()
	defer m.pool.mu.Unlock()
	out := map[string]int{}
	for name, list := range m.pool.idle {
		out[name] = len(list)
	}
	return out
}

// RunWarmPool keeps the configured number of pooled sandboxes per template
// until ctx ends (at most poolFills restores at a time per template:
// poolfill.go). Templates without a boot snapshot are skipped until they
// have one.
func (m *Manager) RunWarmPool(ctx context.Context) {
	var names []string
	for name := range m.cfg.WarmPool {
		names = append(names, name)
	}
	for _, name := range m.cfg.AutoWarmPool {
		if _, fixed := m.cfg.WarmPool[name]; !fixed {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	kick := make(chan struct{}, 1)
	m.pool.mu.Lock()
	m.pool.kick = kick
	m.pool.mu.Unlock()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	sort.Strings(names)
	var fills sync.WaitGroup
	defer fills.Wait()
	for {
		for _, name := range names {
			m.startFills(ctx, name, &fills)
			m.trimPool(ctx, name)
		}
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-t.C:
		}
	}
}

// poolSandboxOverhead is what a pooled sandbox costs beyond its memory
// limit in the memory check (the runtime's own processes).
const poolSandboxOverhead = 64 << 20

// trimPool gives back idle sandboxes of name beyond its target (demand
// fell) or while the host is short of memory, one per call.
func (m *Manager) trimPool(ctx context.Context, name string) {
	target, short := m.poolTarget(name), !m.memoryFor(0) // poolTarget takes pool.mu
	m.pool.mu.Lock()
	list := m.pool.idle[name]
	var p *pooled
	if n := len(list); n > 0 && (n > target || short) {
		p, m.pool.idle[name] = list[n-1], list[:n-1]
	}
	m.pool.mu.Unlock()
	if p != nil {
		m.releaseChild(ctx, p.k)
		m.log.Info("warm pool: sandbox given back", "template", name, "sandbox", p.k.id)
	}
}

// defaultNetwork reports whether req asks for the network a pooled sandbox
// was set up with; anything else needs a network set up for it.
func defaultNetwork(req CreateRequest, allowInternet bool) bool {
	return allowInternet && req.Egress.Empty() && len(req.NetworkRules) == 0 && req.EgressProxy == nil && req.Approval == nil
}

// claimPooled serves a create from the warm pool; ok is false when there is
// no fitting pooled sandbox (pooled ones have the default network: internet
// allowed, no egress rules, no network.rules steered to the egress proxy,
// no egressProxy tunnel, no approval hook) or its /init failed.
func (m *Manager) claimPooled(ctx context.Context, tpl *Template, req CreateRequest, allowInternet bool) (*Sandbox, bool) {
	if !m.pooled(req.TemplateID) || !defaultNetwork(req, allowInternet) {
		return nil, false
	}
	m.pool.noteCreate(req.TemplateID, time.Now())
	start := time.Now()
	r := m.newSteps(opCreate, kindPool, "")
	var p *pooled
	waited := false
	errEmpty := errors.New("no pooled sandbox")
	if err := r.run(ctx, nil, step{stepClaim, func(ctx context.Context) error {
		p = m.pool.pop(req.TemplateID, tpl.Hash)
		if p == nil {
			p, waited = m.pool.awaitFill(ctx, req.TemplateID, tpl.Hash), true
		}
		if p == nil {
			return errEmpty
		}
		r.id = p.k.id
		return nil
	}}); err != nil {
		return nil, false
	}
	p.k.steps = r // init and register are this create's steps
	// The refill starts once this claim is done, so it does not compete
	// with the /init for the CPU.
	defer m.pool.wake()
	src := restoreSource{spec: p.boot.spec, tpl: tpl, templateID: req.TemplateID, alias: tpl.Name,
		extra: newExtra(req)}
	parent := m.restoredRecord(src, req, allowInternet)
	p.k.baseEnv = maps.Clone(tpl.Env)
	sb, err := m.registerChild(ctx, p.k, &parent, req.Timeout)
	if err != nil {
		m.releaseChild(ctx, p.k)
		m.log.Warn("warm pool: claiming a sandbox failed; restoring a new one", "template", tpl.Name, "err", err)
		return nil, false
	}
	m.log.Info("sandbox created from the warm pool", "sandbox", sb.ID, "template", tpl.Name, "waited_for_fill", waited, "elapsed", time.Since(start))
	return sb, true
}

// DrainWarmPool stops filling and destroys every pooled sandbox.
func (m *Manager) DrainWarmPool(ctx context.Context) {
	m.pool.mu.Lock()
	m.pool.closed = true
	var all []*pooled
	for _, list := range m.pool.idle {
		all = append(all, list...)
	}
	m.pool.idle = nil
	var fills []chan struct{}
	for _, list := range m.pool.filling {
		for _, f := range list {
			fills = append(fills, f.done)
		}
	}
	m.pool.mu.Unlock()
	for _, p := range all {
		m.releaseChild(ctx, p.k)
	}
	if len(all) > 0 {
		m.log.Info("warm pool drained", "destroyed", len(all))
	}
	// A fill under way sees the pool closed (or its context cancelled) and
	// gives back what it took: wait for that, or a daemon that exits now
	// leaves that sandbox's mounts and network namespace behind.
	for _, done := range fills {
		select {
		case <-done:
		case <-ctx.Done():
			m.log.Warn("warm pool: a fill did not end before the shutdown's deadline", "err", ctx.Err())
			return
		}
	}
}
