package sandbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// The pool restores up to two sandboxes at once (issue 24: one at a time
// kept sequential creates at the rate of one restore), never more than
// that nor more than its target asks for, and a fill under way counts
// toward the target.
func TestWarmPoolFillsInParallel(t *testing.T) {
	t.Parallel()
	env, rt := snapEnvWith(t, func(c *sandbox.Config) {
		c.BootSnapshots = true
		c.WarmPool = map[string]int{"base": 3}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := env.Manager.PrepareBootSnapshot(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	rt.Mu.Lock()
	rt.Gate = gate
	rt.Mu.Unlock()
	done := make(chan struct{})
	go func() {
		env.Manager.RunWarmPool(ctx)
		close(done)
	}()
	var release sync.Once
	open := func() { release.Do(func() { close(gate) }) }
	defer func() { open(); cancel(); <-done }() // a failed check must not leave fills blocked
	loads := func() int {
		rt.Mu.Lock()
		defer rt.Mu.Unlock()
		return len(rt.Loaded)
	}
	deadline := time.Now().Add(10 * time.Second)
	for loads() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d fill(s) under way; want 2 at once", loads())
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a third would have started by now
	if n := loads(); n != 2 {
		t.Fatalf("%d fills under way; want at most 2", n)
	}
	rt.Mu.Lock()
	rt.Gate = nil
	rt.Mu.Unlock()
	open()
	deadline = time.Now().Add(10 * time.Second)
	for env.Manager.WarmPoolSizes()["base"] != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("pool = %v after %d loads; want 3 idle", env.Manager.WarmPoolSizes(), loads())
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if n := loads(); n != 3 {
		t.Fatalf("%d restores for a pool of 3: fills under way must count toward the target", n)
	}
}

// A shutdown (the pool's context cancelled, then DrainWarmPool) does not
// cancel a fill's restore half-way: a `runsc restore` killed that way left
// its sandbox's processes behind. The fill ends and its sandbox is given
// back before DrainWarmPool returns.
func TestWarmPoolShutdownLetsRestoreFinish(t *testing.T) {
	t.Parallel()
	env, rt := snapEnvWith(t, func(c *sandbox.Config) {
		c.BootSnapshots = true
		c.WarmPool = map[string]int{"base": 1}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := env.Manager.PrepareBootSnapshot(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var restoreErr error
	rt.Mu.Lock()
	rt.RestoreCtxHook = func(ctx context.Context, id string) error {
		entered <- struct{}{}
		<-release
		restoreErr = ctx.Err()
		return restoreErr
	}
	rt.Mu.Unlock()
	done := make(chan struct{})
	go func() {
		env.Manager.RunWarmPool(ctx)
		close(done)
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the fill's restore did not start")
	}
	cancel()
	drained := make(chan struct{})
	go func() {
		env.Manager.DrainWarmPool(context.Background())
		close(drained)
	}()
	time.Sleep(100 * time.Millisecond)
	close(release)
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Fatal("DrainWarmPool did not return after the fill ended")
	}
	<-done
	if restoreErr != nil {
		t.Fatalf("the shutdown cancelled the restore half-way: %v", restoreErr)
	}
	ids, _ := env.Runtime.List(context.Background())
	for _, id := range ids {
		if env.Runtime.Running(id) {
			t.Errorf("sandbox %s still runs after the drain", id)
		}
	}
}
