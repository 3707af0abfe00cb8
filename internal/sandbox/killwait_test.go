package sandbox_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// slowExitRuntime is the fake runtime whose processes take long to exit
// after SIGKILL: Stop only records the signal, and WaitStopped is held
// until release is closed (a process stuck in the kernel, or a Sentry
// freeing gigabytes under load). Destroy before the wait returned is
// recorded as an error: it would unmount a root filesystem still in use.
type slowExitRuntime struct {
	*sandboxtest.Runtime
	waiting chan string
	release chan struct{}

	mu             sync.Mutex
	signalled      map[string]bool
	exited         map[string]bool
	destroyedEarly []string
}

func (r *slowExitRuntime) Caps() runtime.Caps {
	c := r.Runtime.Caps()
	c.Stopper = r
	return c
}

func (r *slowExitRuntime) Stop(_ context.Context, id, _ string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.signalled[id] = true
	return nil
}

func (r *slowExitRuntime) WaitStopped(ctx context.Context, id, _ string) error {
	r.waiting <- id
	select {
	case <-r.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.exited[id] = true
	return nil
}

func (r *slowExitRuntime) Destroy(ctx context.Context, id, dir string) error {
	r.mu.Lock()
	if r.signalled[id] && !r.exited[id] {
		r.destroyedEarly = append(r.destroyedEarly, id)
	}
	r.mu.Unlock()
	return r.Runtime.Destroy(ctx, id, dir)
}

func (r *slowExitRuntime) state(id string) (signalled, exited bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.signalled[id], r.exited[id]
}

// A kill answers once SIGKILL is sent and the network cut, while the
// sandbox's processes are still exiting (issue 24: under load that wait was
// most of a kill). The wait moves to the background teardown, before the
// runtime instance is destroyed and before the slot (the address) is handed
// out again.
func TestKillAnswersBeforeTheProcessesExited(t *testing.T) {
	t.Parallel()
	rt := &slowExitRuntime{Runtime: sandboxtest.NewRuntime(), waiting: make(chan string, 8),
		release: make(chan struct{}), signalled: map[string]bool{}, exited: map[string]bool{}}
	nw := &stallingNetwork{Network: sandboxtest.NewNetwork(netip.MustParseAddr("127.0.0.1")),
		entered: make(chan string, 8), release: make(chan struct{}), cut: map[int]string{}}
	close(nw.release) // the network tears down at once
	var once sync.Once
	release := func() { once.Do(func() { close(rt.release) }) }
	t.Cleanup(release) // before the env's Close (cleanups run last first)
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) { c.Runtime = rt; c.Network = nw })
	sb := create(t, env, sandbox.CreateRequest{})
	slot := nw.SlotOf(sb.ID)
	if slot < 0 {
		t.Fatal("no slot for the sandbox")
	}

	killWithin(t, env, sb.ID, 20*time.Second, "Kill waited for the sandbox's processes to exit")
	if signalled, exited := rt.state(sb.ID); !signalled || exited {
		t.Errorf("when the kill answered: signalled=%v exited=%v, want signalled and still exiting", signalled, exited)
	}
	if !nw.isCut(sb.ID, slot) {
		t.Error("the kill answered before the sandbox was cut")
	}
	if _, err := env.Manager.Lookup(sb.ID); !sandbox.IsNotFound(err) {
		t.Errorf("Lookup after kill: %v, want 404", err)
	}
	select {
	case id := <-rt.waiting: // the background teardown waits, held
		if id != sb.ID {
			t.Fatalf("waiting for %s, want %s", id, sb.ID)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no background wait started")
	}

	// While the processes are exiting, a new sandbox gets another slot,
	// and the killed one is neither destroyed nor uncut.
	sb2 := create(t, env, sandbox.CreateRequest{})
	if s2 := nw.SlotOf(sb2.ID); s2 == slot {
		t.Fatalf("slot %d handed out again while the killed sandbox's processes are exiting", slot)
	}
	if !nw.isCut(sb.ID, slot) {
		t.Error("slot uncut while the killed sandbox's processes are exiting")
	}

	release()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := env.Manager.WaitTeardowns(ctx); err != nil {
		t.Fatal(err)
	}
	rt.mu.Lock()
	early := rt.destroyedEarly
	rt.mu.Unlock()
	if len(early) > 0 {
		t.Errorf("destroyed before their processes exited: %v", early)
	}
	if nw.isCut(sb.ID, slot) {
		t.Error("slot still cut after its teardown")
	}
	sb3 := create(t, env, sandbox.CreateRequest{})
	if s3 := nw.SlotOf(sb3.ID); s3 != slot {
		t.Errorf("after the teardown the next sandbox got slot %d, want the freed slot %d", s3, slot)
	}
}
