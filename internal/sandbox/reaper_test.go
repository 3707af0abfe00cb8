package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

func TestReapReleasesStoppedSandboxes(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	dead := create(t, env, sandbox.CreateRequest{Timeout: time.Minute})
	vanished := create(t, env, sandbox.CreateRequest{Timeout: time.Minute})
	alive := create(t, env, sandbox.CreateRequest{Timeout: time.Minute})
	env.Runtime.SetState(dead.ID, runtime.StateStopped)
	env.Runtime.Forget(vanished.ID)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go env.Manager.Reap(ctx, 20*time.Millisecond)

	for _, id := range []string{dead.ID, vanished.ID} {
		if !waitGone(env.Manager, id, 2*time.Second) {
			t.Fatalf("stopped sandbox %s still reported", id)
		}
		deadline := time.Now().Add(time.Second)
		for env.Store.Has(id) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if env.Store.Has(id) {
			t.Errorf("store row of reaped sandbox %s left", id)
		}
	}
	if !env.Runtime.WasDestroyed(dead.ID) {
		t.Error("stopped sandbox not destroyed in the runtime")
	}
	if _, err := get(env.Manager, alive.ID); err != nil {
		t.Fatalf("running sandbox reaped: %v", err)
	}
}

func TestReapDestroysOrphans(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	live := create(t, env, sandbox.CreateRequest{Timeout: time.Minute})
	// A runtime sandbox nobody created through this manager (a create cut
	// short by a daemon crash, finished by runsc after Restore).
	env.Runtime.SetState("iorphan0000000000000", runtime.StateRunning)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go env.Manager.Reap(ctx, 20*time.Millisecond)
	deadline := time.Now().Add(2 * time.Second)
	for !env.Runtime.WasDestroyed("iorphan0000000000000") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !env.Runtime.WasDestroyed("iorphan0000000000000") {
		t.Fatal("orphaned runtime sandbox not destroyed")
	}
	if env.Runtime.WasDestroyed(live.ID) {
		t.Fatal("live sandbox destroyed as an orphan")
	}
	if _, err := get(env.Manager, live.ID); err != nil {
		t.Fatalf("live sandbox gone: %v", err)
	}
}
