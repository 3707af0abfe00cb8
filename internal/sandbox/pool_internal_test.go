package sandbox

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestPoolTargetFromDemand(t *testing.T) {
	m := &Manager{cfg: Config{
		WarmPool:        map[string]int{"fixed": 2, "off": 0},
		AutoWarmPool:    []string{"auto", "off"},
		AutoWarmPoolMax: 3,
	}}
	if !m.pooled("fixed") || !m.pooled("auto") || m.pooled("off") || m.pooled("other") {
		t.Fatal("pooled: a fixed size wins over the automatic list, 0 turns a pool off")
	}
	if got := m.poolTarget("fixed"); got != 2 {
		t.Errorf("fixed target %d, want 2", got)
	}
	if got := m.poolTarget("auto"); got != 1 {
		t.Errorf("idle automatic target %d, want 1", got)
	}
	now := time.Now()
	m.pool.noteCreate("auto", now.Add(-2*demandWindow)) // too old to count
	m.pool.noteCreate("auto", now)
	if got := m.poolTarget("auto"); got != 2 {
		t.Errorf("target after one recent create %d, want 2", got)
	}
	for i := 0; i < 10; i++ {
		m.pool.noteCreate("auto", now)
	}
	if got := m.poolTarget("auto"); got != 3 {
		t.Errorf("target under load %d, want the maximum 3", got)
	}
	if got := m.poolTarget("other"); got != 0 {
		t.Errorf("unpooled target %d", got)
	}
}

func TestPoolMemoryReserve(t *testing.T) {
	avail := int64(3 << 30)
	m := &Manager{cfg: Config{PoolMemoryReserve: 2 << 30, HostMemAvailable: func() (int64, error) { return avail, nil }}}
	if !m.memoryFor(512 << 20) {
		t.Error("3 GiB available, 2 GiB reserve: a 512 MiB sandbox must fit")
	}
	if m.memoryFor(1536 << 20) {
		t.Error("a 1.5 GiB sandbox would eat into the reserve")
	}
	avail = 1 << 30
	if m.memoryFor(0) {
		t.Error("below the reserve the pool must give sandboxes back")
	}
	m.cfg.HostMemAvailable = func() (int64, error) { return 0, errors.New("no meminfo") }
	if !m.memoryFor(1 << 40) {
		t.Error("unknown memory: only the size bounds the pool")
	}
}

// fillOne and trimPool read the target while the pool is not locked (a
// deadlock here once kept every automatic pool empty).
func TestPoolTargetWithoutLock(t *testing.T) {
	m := &Manager{cfg: Config{AutoWarmPool: []string{"auto"}, AutoWarmPoolMax: 2,
		HostMemAvailable: func() (int64, error) { return 1 << 40, nil }}}
	m.pool.closed = true
	done := make(chan struct{})
	go func() {
		defer close(done)
		if m.fillOne(t.Context(), "auto") {
			t.Error("a closed pool was filled")
		}
		m.trimPool(t.Context(), "auto")
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("fillOne/trimPool deadlocked on the pool's lock")
	}
}

// A create that finds the pool empty waits for the fill under way (one
// create per fill) and gets what it adds; others, and creates of another
// template version, do not wait.
func TestPoolAwaitFill(t *testing.T) {
	var p poolState
	ctx := context.Background()
	if got := p.awaitFill(ctx, "tpl", "h1"); got != nil {
		t.Fatal("no fill under way: nothing to wait for")
	}
	end := p.startFill("tpl", "h1")
	got := make(chan *pooled, 1)
	go func() { got <- p.awaitFill(ctx, "tpl", "h1") }()
	// Wait until the first create is registered as the fill's waiter.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		p.mu.Lock()
		w := p.filling["tpl"][0].waiter
		p.mu.Unlock()
		if w {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the create never waited for the fill")
		}
	}
	start := time.Now()
	if p.awaitFill(ctx, "tpl", "h1") != nil || time.Since(start) > time.Second {
		t.Fatal("a second create must not wait for a fill another create waits for")
	}
	if p.awaitFill(ctx, "tpl", "h2") != nil {
		t.Fatal("a create of another template version must not wait")
	}
	want := &pooled{hash: "h1"}
	p.mu.Lock()
	p.idle = map[string][]*pooled{"tpl": {want}}
	p.mu.Unlock()
	end()
	select {
	case g := <-got:
		if g != want {
			t.Fatalf("the waiter got %v, want the filled sandbox", g)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not return when the fill ended")
	}
	if p.pop("tpl", "h1") != nil {
		t.Fatal("the filled sandbox was handed out twice")
	}

	// A fill that fails hands the waiter nothing; a cancelled create stops waiting.
	end = p.startFill("tpl", "h1")
	go func() { time.Sleep(20 * time.Millisecond); end() }()
	if p.awaitFill(ctx, "tpl", "h1") != nil {
		t.Fatal("a failed fill has nothing to hand out")
	}
	end = p.startFill("tpl", "h1")
	defer end()
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if p.awaitFill(cctx, "tpl", "h1") != nil {
		t.Fatal("a cancelled create got a sandbox")
	}
}

// With two fills under way, a second create waits for the second fill
// (the first is taken by another create); a third restores its own.
func TestPoolAwaitSecondFill(t *testing.T) {
	var p poolState
	ctx := context.Background()
	end1 := p.startFill("tpl", "h1")
	end2 := p.startFill("tpl", "h1")
	waiting := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			p.mu.Lock()
			w := 0
			for _, f := range p.filling["tpl"] {
				if f.waiter {
					w++
				}
			}
			p.mu.Unlock()
			if w == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d creates wait; want %d", w, n)
			}
		}
	}
	got := make(chan *pooled, 2)
	go func() { got <- p.awaitFill(ctx, "tpl", "h1") }()
	waiting(1)
	go func() { got <- p.awaitFill(ctx, "tpl", "h1") }()
	waiting(2)
	if p.awaitFill(ctx, "tpl", "h1") != nil {
		t.Fatal("a third create must not wait: both fills have a waiter")
	}
	a, b := &pooled{hash: "h1"}, &pooled{hash: "h1"}
	p.mu.Lock()
	p.idle = map[string][]*pooled{"tpl": {a}}
	p.mu.Unlock()
	end1()
	first := <-got
	p.mu.Lock()
	p.idle["tpl"] = append(p.idle["tpl"], b)
	p.mu.Unlock()
	end2()
	second := <-got
	if first == nil || second == nil || first == second {
		t.Fatalf("the waiters got %p and %p; want one sandbox each", first, second)
	}
	end1() // ending twice is harmless
	if end, _ := p.reserveFill("tpl", "h1", 3, 2); end == nil {
		t.Fatal("no fill under way, none idle: a fill is needed")
	} else {
		if end2, n := p.reserveFill("tpl", "h1", 3, 2); end2 == nil || n != 2 {
			t.Fatalf("a second fill at once: %v, %d running", end2 != nil, n)
		} else {
			if end3, n := p.reserveFill("tpl", "h1", 3, 2); end3 != nil || n != 2 {
				t.Fatal("a third fill beyond the limit of 2")
			}
			end2()
		}
		p.mu.Lock()
		p.idle["tpl"] = []*pooled{a, b}
		p.mu.Unlock()
		if end3, _ := p.reserveFill("tpl", "h1", 3, 2); end3 != nil {
			t.Fatal("two idle and one fill under way make the target of 3")
		}
		end()
	}
}
