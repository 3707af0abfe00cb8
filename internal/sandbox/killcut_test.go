package sandbox_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// stoppingRuntime is the fake runtime with a fast Stop (runtime.Stopper),
// as gVisor and microVMs have.
type stoppingRuntime struct {
	*sandboxtest.Runtime
	mu      sync.Mutex
	stopped map[string]bool
}

func (r *stoppingRuntime) Caps() runtime.Caps {
	c := r.Runtime.Caps()
	c.Stopper = r
	return c
}

func (r *stoppingRuntime) Stop(_ context.Context, id, _ string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped[id] = true
	return nil
}

// WaitStopped returns at once: the fake's processes exit when signalled.
func (r *stoppingRuntime) WaitStopped(context.Context, string, string) error { return nil }

func (r *stoppingRuntime) wasStopped(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped[id]
}

// stallingNetwork cuts at once (as network.Manager.Cut does) and holds
// every Teardown until release is closed, as the kernel's rtnl lock holds a
// veth deletion on a busy host. Like the real firewall, a slot stays cut
// until its Teardown: a Setup in a cut slot fails.
type stallingNetwork struct {
	*sandboxtest.Network
	entered chan string
	release chan struct{}
	mu      sync.Mutex
	cut     map[int]string // slot → id
}

func (n *stallingNetwork) Cut(_ context.Context, id string, slot int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[slot] = id
	return nil
}

func (n *stallingNetwork) Setup(ctx context.Context, id string, slot int, opts network.Options) (*network.Endpoint, error) {
	n.mu.Lock()
	owner, cut := n.cut[slot]
	n.mu.Unlock()
	if cut {
		return nil, fmt.Errorf("slot %d is still cut (killed sandbox %s not torn down)", slot, owner)
	}
	return n.Network.Setup(ctx, id, slot, opts)
}

func (n *stallingNetwork) Teardown(ctx context.Context, id string, slot int) error {
	n.entered <- id
	select {
	case <-n.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := n.Network.Teardown(ctx, id, slot); err != nil {
		return err
	}
	n.mu.Lock()
	if n.cut[slot] == id {
		delete(n.cut, slot)
	}
	n.mu.Unlock()
	return nil
}

func (n *stallingNetwork) isCut(id string, slot int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut[slot] == id
}

// A kill answers once the sandbox is stopped and cut, while the network
// teardown (the veth deletion) is still held; the slot, and with it the
// veth name and the address, is handed out again only after that teardown
// finished (issue 24).
func TestKillAnswersBeforeNetworkTeardown(t *testing.T) {
	t.Parallel()
	rt := &stoppingRuntime{Runtime: sandboxtest.NewRuntime(), stopped: map[string]bool{}}
	nw := &stallingNetwork{Network: sandboxtest.NewNetwork(netip.MustParseAddr("127.0.0.1")),
		entered: make(chan string, 8), release: make(chan struct{}), cut: map[int]string{}}
	released := false
	release := func() {
		if !released {
			released = true
			close(nw.release)
		}
	}
	t.Cleanup(release) // before the env's Close (cleanups run last first)
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) { c.Runtime = rt; c.Network = nw })
	sb := create(t, env, sandbox.CreateRequest{})
	slot := nw.SlotOf(sb.ID)
	if slot < 0 {
		t.Fatal("no slot for the sandbox")
	}

	killWithin(t, env, sb.ID, 20*time.Second, "Kill waited for the network teardown")
	if !rt.wasStopped(sb.ID) {
		t.Error("the kill answered before the sandbox was stopped")
	}
	if !nw.isCut(sb.ID, slot) {
		t.Error("the kill answered before the sandbox was cut")
	}
	if _, err := env.Manager.Lookup(sb.ID); !sandbox.IsNotFound(err) {
		t.Errorf("Lookup after kill: %v, want 404", err)
	}
	select {
	case <-nw.entered: // the background teardown runs, held
	case <-time.After(20 * time.Second):
		t.Fatal("no background teardown started")
	}

	// While the teardown is held, a new sandbox gets another slot.
	sb2 := create(t, env, sandbox.CreateRequest{})
	if s2 := nw.SlotOf(sb2.ID); s2 == slot {
		t.Fatalf("slot %d handed out again while its teardown runs", slot)
	}

	release()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := env.Manager.WaitTeardowns(ctx); err != nil {
		t.Fatal(err)
	}
	if nw.isCut(sb.ID, slot) {
		t.Error("slot still cut after its teardown")
	}
	// Now the lowest free slot is the killed sandbox's again, uncut.
	sb3 := create(t, env, sandbox.CreateRequest{})
	if s3 := nw.SlotOf(sb3.ID); s3 != slot {
		t.Errorf("after the teardown the next sandbox got slot %d, want the freed slot %d", s3, slot)
	}
}

// killWithin kills sandbox id and fails the test when the kill errs or has
// not answered after limit (stalled says what it must not have waited for).
func killWithin(t *testing.T, env *sandboxtest.Env, id string, limit time.Duration, stalled string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- env.Manager.Kill(context.Background(), id) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Kill: %v", err)
		}
	case <-time.After(limit):
		t.Fatal(stalled)
	}
}
