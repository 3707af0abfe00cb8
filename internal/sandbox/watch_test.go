package sandbox_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// recordingObserver records lifecycle events.
type recordingObserver struct {
	mu      sync.Mutex
	events  []string
	elapsed time.Duration
}

func (o *recordingObserver) add(s string) {
	o.mu.Lock()
	o.events = append(o.events, s)
	o.mu.Unlock()
}
func (o *recordingObserver) Created(sb *sandbox.Sandbox, d time.Duration) {
	o.add("created " + sb.ID)
	o.mu.Lock()
	o.elapsed = d
	o.mu.Unlock()
}
func (o *recordingObserver) CreateFailed(err error, _ time.Duration) { o.add("failed " + err.Error()) }
func (o *recordingObserver) Removed(id string)                       { o.add("removed " + id) }
func (o *recordingObserver) Stopped(id, reason string)               { o.add("stopped " + id + " " + reason) }

func (o *recordingObserver) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.events...)
}

func TestReapStoppedAndObserver(t *testing.T) {
	t.Parallel()
	obs := &recordingObserver{}
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) { c.Observer = obs })
	ctx := context.Background()
	dead, err := env.Manager.Create(ctx, sandbox.CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	alive, err := env.Manager.Create(ctx, sandbox.CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Manager.Create(ctx, sandbox.CreateRequest{Timeout: time.Minute, TemplateID: "nope"}); err == nil {
		t.Fatal("create with an unknown template succeeded")
	}

	// Nothing stopped: nothing happens.
	if err := env.Manager.ReapStopped(ctx); err != nil {
		t.Fatal(err)
	}
	if len(env.Manager.List()) != 2 {
		t.Fatalf("%d sandboxes after a no-op reap, want 2", len(env.Manager.List()))
	}

	// A single sighting is not enough (transient misreadings)...
	env.Runtime.SetState(alive.ID, runtime.StateStopped)
	env.Runtime.SetState(dead.ID, runtime.StateStopped)
	if err := env.Manager.ReapStopped(ctx); err != nil {
		t.Fatal(err)
	}
	if len(env.Manager.List()) != 2 {
		t.Fatalf("%d sandboxes after one sighting, want 2", len(env.Manager.List()))
	}
	// ...and a sandbox that reads running again is kept.
	env.Runtime.SetState(alive.ID, runtime.StateRunning)
	if err := env.Manager.ReapStopped(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = get(env.Manager, dead.ID)
	if !sandbox.IsNotFound(err) || !strings.Contains(err.Error(), "stopped unexpectedly") {
		t.Fatalf("Get(dead) = %v, want a 404 saying it stopped unexpectedly", err)
	}
	if err := env.Manager.Kill(ctx, dead.ID); !sandbox.IsNotFound(err) || !strings.Contains(err.Error(), "stopped unexpectedly") {
		t.Fatalf("Kill(dead) = %v, want the same 404", err)
	}
	if !env.Runtime.WasDestroyed(dead.ID) {
		t.Fatal("the stopped sandbox's runtime state was not destroyed")
	}
	if _, err := get(env.Manager, alive.ID); err != nil {
		t.Fatalf("neighbour: %v", err)
	}

	want := []string{
		"created " + dead.ID,
		"created " + alive.ID,
		"failed template 'nope' not found",
		"stopped " + dead.ID + " ",
		"removed " + dead.ID,
	}
	got := obs.list()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("observer events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
