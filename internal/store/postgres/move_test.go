package postgres

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/postgres/pgtest"
	"github.com/airlock-sandbox/airlock/internal/store/storetest"
)

// TestClaimSandbox: a paused sandbox with an image moves to the claiming
// node (announced on the route channel); of concurrent claims one wins;
// a running one, one without an image, one claimed from the wrong node and
// an unknown one are refused with ErrMoved / ErrNotFound.
func TestClaimSandbox(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	ctx := ctxFor(t, 60*time.Second)
	a, b, c, all := openNode(t, url, "a"), openNode(t, url, "b"), openNode(t, url, "c"), openNode(t, url, "")
	now := time.Now()
	put := func(id, state, extra string) {
		t.Helper()
		s := storetest.SampleSandbox(id, now)
		s.State, s.Extra = state, extra
		if err := a.PutSandbox(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	put("paused1", "paused", `{"image":"paused/paused1"}`)
	put("paused2", "paused", `{"image":"paused/paused2","evacuated":true,"baseTemplate":"py","volumes":[{"volumeID":"v1","name":"data","path":"/mnt/data"}]}`)
	put("running", "running", `{"image":"paused/running"}`)
	put("local", "paused", `{"autoResume":true}`)

	routes, err := all.WatchRoutes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.ClaimSandbox(ctx, "paused1", "a", "paused", nil)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if got.ID != "paused1" || got.State != "paused" || got.Slot != -1 || got.GuestIP != "" {
		t.Fatalf("claimed row %+v", got)
	}
	// a's stale copy cannot write the row back.
	stale := storetest.SampleSandbox("paused1", now)
	if err := a.PutSandbox(ctx, stale); !errors.Is(err, store.ErrMoved) {
		t.Fatalf("a's write of a row b holds: %v, want ErrMoved", err)
	}
	expectRoute(t, routes, cluster.RouteChange{SandboxID: "paused1"})
	if n, err := all.SandboxNode(ctx, "paused1"); err != nil || n != "b" {
		t.Fatalf("node after claim = %q, %v; want b", n, err)
	}
	if _, err := a.GetSandbox(ctx, "paused1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a still sees its claimed sandbox: %v", err)
	}
	// Claimed from a, which no longer has it.
	if _, err := c.ClaimSandbox(ctx, "paused1", "a", "paused", nil); !errors.Is(err, store.ErrMoved) {
		t.Fatalf("second claim from a: %v, want ErrMoved", err)
	}
	// b resumes it: claims it from itself with another state; then nobody
	// can take it.
	// A check that refuses leaves the row as it was.
	errNo := errors.New("agent build missing")
	if _, err := c.ClaimSandbox(ctx, "paused1", "b", "paused", func(s *store.Sandbox) error {
		if s.ID != "paused1" {
			t.Errorf("check saw %s", s.ID)
		}
		return errNo
	}); !errors.Is(err, errNo) {
		t.Fatalf("claim refused by its check: %v", err)
	}
	if n, _ := all.SandboxNode(ctx, "paused1"); n != "b" {
		t.Fatalf("a refused claim moved the row to %s", n)
	}
	if got, err := b.ClaimSandbox(ctx, "paused1", "b", "resuming", nil); err != nil || got.State != "resuming" {
		t.Fatalf("b's own claim: %+v, %v", got, err)
	}
	if _, err := c.ClaimSandbox(ctx, "paused1", "b", "paused", nil); !errors.Is(err, store.ErrMoved) {
		t.Fatalf("claim of a resuming sandbox: %v, want ErrMoved", err)
	}
	for _, id := range []string{"running", "local"} {
		if _, err := b.ClaimSandbox(ctx, id, "a", "paused", nil); !errors.Is(err, store.ErrMoved) {
			t.Fatalf("claim of %s: %v, want ErrMoved", id, err)
		}
	}
	if _, err := b.ClaimSandbox(ctx, "nope", "a", "paused", nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("claim of an unknown sandbox: %v, want ErrNotFound", err)
	}

	// Concurrent claims: exactly one wins.
	var wg sync.WaitGroup
	wins := make(chan string, 2)
	for _, h := range []*DB{b, c} {
		wg.Go(func() {
			if _, err := h.ClaimSandbox(ctx, "paused2", "a", "paused", nil); err == nil {
				wins <- h.NodeID()
			} else if !errors.Is(err, store.ErrMoved) {
				t.Errorf("claim by %s: %v", h.NodeID(), err)
			}
		})
	}
	wg.Wait()
	close(wins)
	var winners []string
	for w := range wins {
		winners = append(winners, w)
	}
	if len(winners) != 1 {
		t.Fatalf("winners of concurrent claims: %v", winners)
	}

	// SandboxRoute: what the api tier needs to move it.
	rt, err := all.SandboxRoute(ctx, "paused2")
	if err != nil {
		t.Fatal(err)
	}
	if rt.NodeID != winners[0] || !rt.Movable || !rt.Evacuated || rt.TemplateID != "py" || rt.State != "paused" || !rt.Volumes {
		t.Fatalf("route %+v", rt)
	}
	if rt, err := all.SandboxRoute(ctx, "running"); err != nil || rt.Movable || rt.NodeID != "a" {
		t.Fatalf("route of a running sandbox %+v, %v", rt, err)
	}
	if rt, err := all.SandboxRoute(ctx, "local"); err != nil || rt.Movable || !rt.AutoResume || rt.Volumes {
		t.Fatalf("route of a paused sandbox without image %+v, %v", rt, err)
	}
	if _, err := all.SandboxRoute(ctx, "nope"); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("route of an unknown sandbox: %v", err)
	}
}

// TestAnySnapshot: every node reads every node's snapshots, by id or by
// name (the newest with it), with the node that made it.
func TestAnySnapshot(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	ctx := ctxFor(t, 60*time.Second)
	a, b := openNode(t, url, "a"), openNode(t, url, "b")
	now := time.Now().UTC().Truncate(time.Microsecond)
	if err := a.PutSnapshot(ctx, &store.Snapshot{ID: "s1", Name: "py", SandboxID: "x", SizeBytes: 5, CreatedAt: now, Spec: "{}"}); err != nil {
		t.Fatal(err)
	}
	if err := b.PutSnapshot(ctx, &store.Snapshot{ID: "s2", Name: "py", CreatedAt: now.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	s, node, err := b.AnySnapshot(ctx, "s1")
	if err != nil || node != "a" || s.ID != "s1" || s.Name != "py" || s.SandboxID != "x" || s.SizeBytes != 5 || !s.CreatedAt.Equal(now) || s.Spec != "{}" {
		t.Fatalf("AnySnapshot(s1) = %+v, %q, %v", s, node, err)
	}
	if s, node, err := a.AnySnapshot(ctx, "py"); err != nil || s.ID != "s2" || node != "b" {
		t.Fatalf("AnySnapshot(py) = %+v, %q, %v; want the newest, s2 on b", s, node, err)
	}
	if _, _, err := a.AnySnapshot(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("AnySnapshot(nope): %v", err)
	}
}
