package sandbox_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// heldStore holds every sandbox row deletion until released, as SQLite's
// writer lock does under a loaded host (15–120 ms, more when a writer is
// stuck); once dead (the daemon that used it was "SIGKILLed") a held
// deletion fails instead of going through.
type heldStore struct {
	*sandboxtest.Store
	mu      sync.Mutex
	held    chan struct{} // closed by release
	dead    bool
	entered chan string
}

func newHeldStore(s *sandboxtest.Store) *heldStore {
	return &heldStore{Store: s, held: make(chan struct{}), entered: make(chan string, 16)}
}

func (s *heldStore) DeleteSandbox(ctx context.Context, id string) error {
	select {
	case s.entered <- id:
	default:
	}
	select {
	case <-s.held:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	dead := s.dead
	s.mu.Unlock()
	if dead {
		return errors.New("database is closed")
	}
	return s.Store.DeleteSandbox(ctx, id)
}

// die makes held deletions fail, then lets them go.
func (s *heldStore) die() {
	s.mu.Lock()
	s.dead = true
	s.mu.Unlock()
	close(s.held)
}

// A kill answers while the store row's deletion is held (issue 24: it
// waited for it, 15–120 ms of SQLite writer lock per kill under load). In
// between the sandbox, running or paused, is gone for clients: 404 on
// lookup, connect and resume, not listed; its teardown (and journal entry)
// stays open until the row is gone. A daemon that dies then finishes the
// kill at its next start from the journal: the row is deleted, the
// sandbox never re-attached.
func TestKillAnswersBeforeTheRowIsDeleted(t *testing.T) {
	t.Parallel()
	for _, paused := range []bool{false, true} {
		name := "running"
		if paused {
			name = "paused"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var held *heldStore
			var rt *ckRuntime
			env := sandboxtest.NewEnv(t, func(c *sandbox.Config) {
				held = newHeldStore(c.Store.(*sandboxtest.Store))
				c.Store = held
				rt = &ckRuntime{Runtime: c.Runtime.(*sandboxtest.Runtime)}
				c.Runtime = rt
			})
			env.Agent.Extra = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/freeze" {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(http.StatusNoContent)
			})
			sb := create(t, env, sandbox.CreateRequest{})
			if paused {
				e, err := env.Manager.Lookup(sb.ID)
				if err != nil {
					t.Fatal(err)
				}
				if err := e.Pause(context.Background()); err != nil {
					t.Fatalf("Pause: %v", err)
				}
			}
			e, err := env.Manager.Lookup(sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			killWithin(t, env, sb.ID, 5*time.Second, "Kill still waiting for the store row's deletion after 5 s")
			select {
			case <-held.entered:
			case <-time.After(5 * time.Second):
				t.Fatal("the row's deletion never started")
			}
			if !env.Store.Has(sb.ID) {
				t.Fatal("set-up: the row is gone although its deletion is held")
			}

			if _, err := env.Manager.Lookup(sb.ID); !sandbox.IsNotFound(err) {
				t.Errorf("Lookup after the kill, row still there: %v, want 404", err)
			}
			if slices.ContainsFunc(env.Manager.List(), func(s *sandbox.Sandbox) bool { return s.ID == sb.ID }) {
				t.Error("killed sandbox listed while its row is still there")
			}
			if _, _, err := e.Connect(context.Background(), time.Minute); !sandbox.IsNotFound(err) {
				t.Errorf("Connect after the kill: %v, want 404", err)
			}
			if _, err := e.Resume(context.Background(), time.Minute); !sandbox.IsNotFound(err) {
				t.Errorf("Resume after the kill: %v, want 404", err)
			}
			if err := env.Manager.Kill(context.Background(), sb.ID); !sandbox.IsNotFound(err) {
				t.Errorf("second Kill: %v, want 404", err)
			}
			wctx, wcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer wcancel()
			if err := env.Manager.WaitTeardowns(wctx); err == nil {
				t.Error("teardown finished while the row was still there")
			}
			if j := journal(t, env.DataDir); !slices.Equal(j, []string{sb.ID}) {
				t.Errorf("journal %v, want the kill's entry", j)
			}

			// The daemon dies with the row still there.
			cctx, ccancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer ccancel()
			_ = env.Manager.Close(cctx)
			held.die()

			m2, err := sandbox.New(sandbox.Config{
				Runtime: rt, Network: env.Network, Templates: env.Templates, Store: env.Store,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), DataDir: env.DataDir,
				AgentPath: "/nonexistent/airlock-envd", Nameservers: []string{"192.0.2.53"},
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m2.Close(context.Background()) })
			if _, err := m2.Reattach(context.Background()); err != nil {
				t.Fatalf("Reattach: %v", err)
			}
			if _, err := m2.Lookup(sb.ID); !sandbox.IsNotFound(err) {
				t.Errorf("killed sandbox re-attached at the next start: %v", err)
			}
			if env.Store.Has(sb.ID) {
				t.Error("row still there after the next start")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := m2.WaitTeardowns(ctx); err != nil {
				t.Fatal(err)
			}
			if j := journal(t, env.DataDir); len(j) != 0 {
				t.Errorf("journal left: %v", j)
			}
		})
	}
}

// heldObserver holds Removed until released (as the event log's file
// removal waits for a write in progress, up to a second under load).
type heldObserver struct {
	nopObs
	release chan struct{}
	removed chan string
}

func (o *heldObserver) Removed(id string) {
	<-o.release
	o.removed <- id
}

// A kill answers without waiting for its observers (metrics, the event
// log's files); they are told right after.
func TestKillAnswersBeforeObserversAreTold(t *testing.T) {
	t.Parallel()
	obs := &heldObserver{release: make(chan struct{}), removed: make(chan string, 1)}
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) { c.Observer = obs })
	sb := create(t, env, sandbox.CreateRequest{})
	killWithin(t, env, sb.ID, 5*time.Second, "Kill still waiting for its observers after 5 s")
	close(obs.release)
	select {
	case id := <-obs.removed:
		if id != sb.ID {
			t.Errorf("observers told %s is gone, want %s", id, sb.ID)
		}
	case <-time.After(5 * time.Second):
		t.Error("observers never told the sandbox is gone")
	}
}
