package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func TestWarmPool(t *testing.T) {
	t.Parallel()
	env, rt := snapEnvWith(t, func(c *sandbox.Config) {
		c.BootSnapshots = true
		c.WarmPool = map[string]int{"base": 2}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := env.Manager.PrepareBootSnapshot(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		env.Manager.RunWarmPool(ctx)
		close(done)
	}()
	loads := func() int {
		rt.Mu.Lock()
		defer rt.Mu.Unlock()
		return len(rt.Loaded)
	}
	waitPool := func(want, wantLoads int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for env.Manager.WarmPoolSizes()["base"] != want || loads() != wantLoads {
			if time.Now().After(deadline) {
				t.Fatalf("pool = %v, loads %d; want %d idle after %d loads", env.Manager.WarmPoolSizes(), loads(), want, wantLoads)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitPool(2, 2)
	if n := len(env.Manager.List()); n != 0 {
		t.Fatalf("pooled sandboxes are listed: %d", n)
	}
	// A create claims a pooled sandbox (no new restore until the refill)
	// and gives it its identity.
	seen := map[string]bool{}
	for i := range 3 {
		sb := create(t, env, sandbox.CreateRequest{Timeout: time.Minute, Secure: true, EnvVars: map[string]string{"I": "x"}})
		if seen[sb.ID] {
			t.Fatalf("sandbox %s handed out twice", sb.ID)
		}
		seen[sb.ID] = true
		in, _ := env.Agent.LastInit()
		if in.EnvVars["E2B_SANDBOX_ID"] != sb.ID || in.EnvVars["I"] != "x" || in.AccessToken == nil || *in.AccessToken != sb.AccessToken {
			t.Fatalf("claimed sandbox %d: %+v, init %+v", i, sb, in)
		}
		if got, err := get(env.Manager, sb.ID); err != nil || got.TemplateID != "base" {
			t.Fatalf("Get(%s) = %+v, %v", sb.ID, got, err)
		}
		waitPool(2, 3+i) // refilled
	}
	// A sandbox without internet access is not served from the pool.
	no := false
	create(t, env, sandbox.CreateRequest{Timeout: time.Minute, AllowInternet: &no})
	if loads() != 6 || env.Manager.WarmPoolSizes()["base"] != 2 {
		t.Fatalf("create without internet: loads %d pool %v", loads(), env.Manager.WarmPoolSizes())
	}
	if n := len(env.Manager.List()); n != 4 {
		t.Fatalf("listed = %d, want 4", n)
	}
	// Draining destroys the pooled sandboxes.
	cancel()
	<-done
	env.Manager.DrainWarmPool(context.Background())
	if got := env.Manager.WarmPoolSizes()["base"]; got != 0 {
		t.Fatalf("pool after drain = %d", got)
	}
	ids, _ := env.Runtime.List(context.Background())
	live := 0
	for _, id := range ids {
		if env.Runtime.Running(id) {
			live++
		}
	}
	if live != 4 {
		t.Fatalf("running runtime sandboxes after drain = %d, want the 4 claimed/created", live)
	}
}

// A daemon that stops while a pool fill is under way waits for the fill to
// give back what it took: DrainWarmPool returned at once, the daemon
// exited, and the sandbox being filled kept its mounts and namespace.
func TestDrainWarmPoolWaitsForAFillUnderWay(t *testing.T) {
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
	gate := make(chan struct{})
	rt.Mu.Lock()
	rt.Gate = gate
	rt.Mu.Unlock()
	go env.Manager.RunWarmPool(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		rt.Mu.Lock()
		n := len(rt.Loaded)
		rt.Mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pool fill did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	drained := make(chan struct{})
	go func() {
		env.Manager.DrainWarmPool(context.Background())
		close(drained)
	}()
	select {
	case <-drained:
		t.Fatal("DrainWarmPool returned while a fill was under way")
	case <-time.After(200 * time.Millisecond):
	}
	close(gate)
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Fatal("DrainWarmPool did not return after the fill ended")
	}
	ids, _ := env.Runtime.List(context.Background())
	for _, id := range ids {
		if env.Runtime.Running(id) {
			t.Errorf("sandbox %s still runs after the drain", id)
		}
	}
}
