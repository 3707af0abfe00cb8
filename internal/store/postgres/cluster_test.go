package postgres

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/postgres/pgtest"
	"github.com/airlock-sandbox/airlock/internal/store/storetest"
)

func openNode(t *testing.T, url, node string) *DB {
	t.Helper()
	db, err := OpenWith(ctxFor(t, 60*time.Second), url, Options{NodeID: node}, testLogger(t))
	if err != nil {
		t.Fatalf("OpenWith(%q): %v", node, err)
	}
	t.Cleanup(func() { db.Close() })
	if db.NodeID() != node {
		t.Fatalf("NodeID() = %q, want %q", db.NodeID(), node)
	}
	return db
}

// TestConformanceScoped: a node's handle is a complete store.Full too.
func TestConformanceScoped(t *testing.T) {
	srv := pgtest.Start(t)
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		url := srv.NewDatabase(t)
		return func(t *testing.T) store.Full { return openNode(t, url, "n1") }
	})
}

// expectRoute waits for the next route change and compares it.
func expectRoute(t *testing.T, ch <-chan cluster.RouteChange, want cluster.RouteChange) {
	t.Helper()
	select {
	case c, ok := <-ch:
		if !ok || c != want {
			t.Fatalf("route change %+v (open %v), want %+v", c, ok, want)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("no route change in 15s, want %+v", want)
	}
}

func TestNodeScope(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	ctx := ctxFor(t, 60*time.Second)
	a, b, all := openNode(t, url, "a"), openNode(t, url, "b"), openNode(t, url, "")
	now := time.Now()

	for _, h := range []struct {
		db *DB
		id string
	}{{a, "sa"}, {b, "sb"}, {all, "sall"}} {
		if err := h.db.PutSandbox(ctx, storetest.SampleSandbox(h.id, now)); err != nil {
			t.Fatal(err)
		}
		if err := h.db.PutSnapshot(ctx, &store.Snapshot{ID: "snap-" + h.id, Name: "name-" + h.id, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
		if err := h.db.PutTemplateBuild(ctx, &store.TemplateBuild{ID: "build-" + h.id, TemplateID: "app", CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	// Each handle sees its own rows only; --role all ("") too.
	for _, h := range []struct {
		db   *DB
		own  string
		them []string
	}{{a, "sa", []string{"sb", "sall"}}, {b, "sb", []string{"sa", "sall"}}, {all, "sall", []string{"sa", "sb"}}} {
		sbs, err := h.db.ListSandboxes(ctx)
		if err != nil || len(sbs) != 1 || sbs[0].ID != h.own {
			t.Fatalf("node %q ListSandboxes = %v, %v; want [%s]", h.db.NodeID(), ids(sbs), err, h.own)
		}
		snaps, err := h.db.ListSnapshots(ctx)
		if err != nil || len(snaps) != 1 || snaps[0].ID != "snap-"+h.own {
			t.Fatalf("node %q ListSnapshots = %d rows, %v; want snap-%s", h.db.NodeID(), len(snaps), err, h.own)
		}
		builds, err := h.db.ListTemplateBuilds(ctx, "app", 10)
		if err != nil || len(builds) != 1 || builds[0].ID != "build-"+h.own {
			t.Fatalf("node %q ListTemplateBuilds = %d rows, %v; want build-%s", h.db.NodeID(), len(builds), err, h.own)
		}
		for _, other := range h.them {
			if _, err := h.db.GetSandbox(ctx, other); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("node %q GetSandbox(%s): %v; want ErrNotFound", h.db.NodeID(), other, err)
			}
			if _, err := h.db.GetSnapshot(ctx, "snap-"+other); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("node %q GetSnapshot(snap-%s): %v; want ErrNotFound", h.db.NodeID(), other, err)
			}
			if _, err := h.db.GetTemplateBuild(ctx, "build-"+other); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("node %q GetTemplateBuild(build-%s): %v; want ErrNotFound", h.db.NodeID(), other, err)
			}
			if err := h.db.DeleteSandbox(ctx, other); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("node %q DeleteSandbox(%s): %v; want ErrNotFound", h.db.NodeID(), other, err)
			}
			if err := h.db.DeleteSnapshot(ctx, "snap-"+other); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("node %q DeleteSnapshot(snap-%s): %v; want ErrNotFound", h.db.NodeID(), other, err)
			}
		}
	}
	// The refused deletes left the rows where they were.
	for id, node := range map[string]string{"sa": "a", "sb": "b", "sall": ""} {
		if got, err := all.SandboxNode(ctx, id); err != nil || got != node {
			t.Fatalf("SandboxNode(%s) = %q, %v; want %q", id, got, err, node)
		}
	}

	// Templates and settings are shared.
	if err := a.PutTemplate(ctx, &store.Template{Name: "base", Hash: "h1"}); err != nil {
		t.Fatal(err)
	}
	if err := b.PutSetting(ctx, "api_key", "k"); err != nil {
		t.Fatal(err)
	}
	for _, db := range []*DB{a, b, all} {
		if tpl, err := db.GetTemplate(ctx, "base"); err != nil || tpl.Hash != "h1" {
			t.Fatalf("node %q GetTemplate = %+v, %v", db.NodeID(), tpl, err)
		}
		if v, err := db.GetSetting(ctx, "api_key"); err != nil || v != "k" {
			t.Fatalf("node %q GetSetting = %q, %v", db.NodeID(), v, err)
		}
	}

	// Rows move only through ClaimSandbox (move_test.go): b writing a row
	// a holds is refused and changes nothing; a rewriting its own row
	// announces nothing.
	routes, err := all.WatchRoutes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.PutSandbox(ctx, storetest.SampleSandbox("sa", now)); err != nil {
		t.Fatal(err)
	}
	if err := b.PutSandbox(ctx, storetest.SampleSandbox("sa", now)); !errors.Is(err, store.ErrMoved) {
		t.Fatalf("b's write of a's row: %v, want ErrMoved", err)
	}
	if err := b.DeleteSandbox(ctx, "sb"); err != nil {
		t.Fatal(err)
	}
	expectRoute(t, routes, cluster.RouteChange{SandboxID: "sb"}) // nothing for "sa"
	if got, err := a.GetSandbox(ctx, "sa"); err != nil || got.ID != "sa" {
		t.Fatalf("a lost its sandbox to b's refused write: %v, %v", got, err)
	}
	if got, err := all.SandboxNode(ctx, "sa"); err != nil || got != "a" {
		t.Fatalf("SandboxNode(sa) = %q, %v; want a", got, err)
	}
}

func ids(l []*store.Sandbox) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = s.ID
	}
	return out
}

func TestLeasePerNode(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	a := openNode(t, url, "n1")
	acquire(t, a, LeaseOptions{Hostname: "host-a", PID: 101})

	// Another daemon with the same node id is refused, naming the node.
	_, err := openNode(t, url, "n1").AcquireLease(ctxFor(t, 30*time.Second), LeaseOptions{Hostname: "host-b", PID: 202})
	var held *LeaseHeldError
	if !errors.As(err, &held) || held.Holder.NodeID != "n1" || held.Holder.Hostname != "host-a" || held.Holder.PID != 101 {
		t.Fatalf("second daemon of node n1: %v; want a *LeaseHeldError naming host-a", err)
	}
	want := regexp.MustCompile(`^node id n1 already used by the airlock daemon on host host-a \(pid 101\), ` +
		`last seen (less than 1 s|\d+ s) ago; one daemon per node id$`)
	if !want.MatchString(err.Error()) {
		t.Fatalf("message %q does not match %s", err, want)
	}

	// Other nodes, and --role all, each take their own lease.
	acquire(t, openNode(t, url, "n2"), LeaseOptions{Hostname: "host-b", PID: 202})
	acquire(t, openNode(t, url, ""), LeaseOptions{Hostname: "host-c", PID: 303})
	heldBy(t, openNode(t, url, ""), LeaseOptions{Hostname: "host-d"}, "host-c", 303)

	// a's lease is unaffected: its heartbeat confirms it.
	if err := a.Lease().beat(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("n1's heartbeat with three leases held: %v", err)
	}
	var rows int
	if err := a.pool.QueryRow(ctxFor(t, 10*time.Second), "SELECT count(*) FROM daemon_lease").Scan(&rows); err != nil || rows != 3 {
		t.Fatalf("daemon_lease has %d rows (%v), want 3", rows, err)
	}
	// Closing releases only its own node's row.
	a.Close()
	acquire(t, openNode(t, url, "n1"), LeaseOptions{Hostname: "host-e", PID: 505})
	heldBy(t, openNode(t, url, ""), LeaseOptions{Hostname: "host-d"}, "host-c", 303)
}

func TestHeartbeatAndNodes(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := ctxFor(t, 60*time.Second)
	db := openDB(t, srv.NewDatabase(t))
	started := time.Now().Add(-time.Minute).Truncate(time.Microsecond).UTC()
	n := cluster.Node{
		ID: "n1", Addr: "10.0.0.1:7000", State: cluster.StateDraining /* ignored */, Runtime: "gvisor",
		Labels: []string{"kvm", "ssd"}, Version: "v1", Gen: 1,
		CPUs: 8, MemoryMB: 16384, DiskMB: 100000, MaxSandboxes: 50,
		ReservedCPUs: 2, ReservedMemoryMB: 1024, Sandboxes: 3,
		Templates: []string{"base", "app:v2"}, WarmPool: map[string]int{"base": 2},
		StartedAt: started,
	}
	if st, err := db.Heartbeat(ctx, n); err != nil || st != cluster.StateLive {
		t.Fatalf("first Heartbeat = %q, %v; want live", st, err)
	}
	if _, err := db.Heartbeat(ctx, cluster.Node{}); err == nil {
		t.Fatal("Heartbeat without an id succeeded")
	}
	if _, err := db.Heartbeat(ctx, cluster.Node{ID: "bad", Labels: []string{"a\x00b"}}); err == nil {
		t.Fatal("Heartbeat with a NUL in a label succeeded")
	}

	// A drain set by someone else survives the node's heartbeats, which
	// still update everything else.
	if err := db.SetNodeState(ctx, "n1", cluster.StateDraining); err != nil {
		t.Fatal(err)
	}
	n.Gen, n.Sandboxes, n.Templates, n.WarmPool, n.Labels = 2, 4, nil, nil, nil
	n.State = cluster.StateLive // ignored too
	if st, err := db.Heartbeat(ctx, n); err != nil || st != cluster.StateDraining {
		t.Fatalf("Heartbeat while draining = %q, %v; want draining", st, err)
	}
	nodes, err := db.Nodes(ctx)
	if err != nil || len(nodes) != 1 {
		t.Fatalf("Nodes = %+v, %v", nodes, err)
	}
	got := nodes[0]
	if got.HeartbeatAt.IsZero() || got.Age < 0 || got.Age > 5*time.Second || !got.LostAt.IsZero() {
		t.Fatalf("heartbeat %v, age %s, lost at %v", got.HeartbeatAt, got.Age, got.LostAt)
	}
	want := n
	want.State = cluster.StateDraining
	want.HeartbeatAt, want.Age = got.HeartbeatAt, got.Age
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Nodes()[0] =\n%+v\nwant\n%+v", got, want)
	}

	// Age is by the server's clock.
	if _, err := db.pool.Exec(ctx, "UPDATE nodes SET heartbeat_at = now() - interval '7 seconds'"); err != nil {
		t.Fatal(err)
	}
	if nodes, err := db.Nodes(ctx); err != nil || nodes[0].Age < 7*time.Second || nodes[0].Age > 12*time.Second {
		t.Fatalf("Age after a heartbeat 7 s ago = %s, %v", nodes[0].Age, err)
	}

	// lost_at follows the state: set when lost, cleared when live again.
	if err := db.SetNodeState(ctx, "n1", cluster.StateLost); err != nil {
		t.Fatal(err)
	}
	if nodes, _ := db.Nodes(ctx); nodes[0].State != cluster.StateLost || nodes[0].LostAt.IsZero() {
		t.Fatalf("after SetNodeState(lost): %+v", nodes[0])
	}
	if err := db.SetNodeState(ctx, "n1", cluster.StateLive); err != nil {
		t.Fatal(err)
	}
	if nodes, _ := db.Nodes(ctx); nodes[0].State != cluster.StateLive || !nodes[0].LostAt.IsZero() {
		t.Fatalf("after SetNodeState(live): %+v", nodes[0])
	}
	if err := db.SetNodeState(ctx, "nope", cluster.StateLive); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("SetNodeState(unknown node): %v; want cluster.ErrNotFound", err)
	}
	if err := db.SetNodeState(ctx, "n1", "sleeping"); err == nil {
		t.Fatal("SetNodeState(sleeping) succeeded")
	}

	// Nodes are listed by id.
	for _, id := range []string{"n3", "n2"} {
		if _, err := db.Heartbeat(ctx, cluster.Node{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	nodes, err = db.Nodes(ctx)
	if err != nil || len(nodes) != 3 || nodes[0].ID != "n1" || nodes[1].ID != "n2" || nodes[2].ID != "n3" {
		t.Fatalf("Nodes = %+v, %v; want n1, n2, n3", nodes, err)
	}
	if err := db.RemoveNode(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	if err := db.RemoveNode(ctx, "n2"); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("RemoveNode of a removed node: %v; want cluster.ErrNotFound", err)
	}
	if nodes, err := db.Nodes(ctx); err != nil || len(nodes) != 2 {
		t.Fatalf("Nodes after RemoveNode = %d, %v", len(nodes), err)
	}
}

func TestRoutes(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := ctxFor(t, 60*time.Second)
	url := srv.NewDatabase(t)
	api, a, b := openDB(t, url), openNode(t, url, "a"), openNode(t, url, "b")
	now := time.Now()

	for _, fn := range []func(context.Context, string) (string, error){
		api.SandboxNode, api.SnapshotNode, api.BuildNode, api.TemplateBuildNode,
	} {
		if _, err := fn(ctx, "missing"); !errors.Is(err, cluster.ErrNotFound) {
			t.Fatalf("route of a missing row: %v; want cluster.ErrNotFound", err)
		}
	}
	if toks, err := api.SandboxTokens(ctx); err != nil || len(toks) != 0 {
		t.Fatalf("SandboxTokens on an empty store = %v, %v", toks, err)
	}

	sa := storetest.SampleSandbox("s1", now)
	sa.AccessToken = "tok-a"
	sb := storetest.SampleSandbox("s2", now)
	sb.AccessToken = "tok-b"
	sb.State = "paused"
	if err := a.PutSandbox(ctx, sa); err != nil {
		t.Fatal(err)
	}
	if err := b.PutSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	// The snapshot named "dup" exists on both nodes: the newest wins; an id
	// wins over a name.
	for _, s := range []struct {
		db   *DB
		snap store.Snapshot
	}{
		{a, store.Snapshot{ID: "snap1", Name: "dup", CreatedAt: now.Add(-time.Hour)}},
		{b, store.Snapshot{ID: "snap2", Name: "dup", CreatedAt: now}},
		{a, store.Snapshot{ID: "snap3", Name: "snap2", CreatedAt: now.Add(time.Hour)}},
		{b, store.Snapshot{ID: "snap4"}},
	} {
		if err := s.db.PutSnapshot(ctx, &s.snap); err != nil {
			t.Fatal(err)
		}
	}
	for _, bl := range []struct {
		db *DB
		b  store.TemplateBuild
	}{
		{a, store.TemplateBuild{ID: "b1", TemplateID: "app", CreatedAt: now.Add(-time.Hour)}},
		{b, store.TemplateBuild{ID: "b2", TemplateID: "app", CreatedAt: now}},
		{a, store.TemplateBuild{ID: "b3", TemplateID: "other", CreatedAt: now}},
	} {
		if err := bl.db.PutTemplateBuild(ctx, &bl.b); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		fn   func(context.Context, string) (string, error)
		key  string
		want string
	}{
		{api.SandboxNode, "s1", "a"}, {api.SandboxNode, "s2", "b"},
		{api.SnapshotNode, "snap1", "a"}, {api.SnapshotNode, "dup", "b"}, {api.SnapshotNode, "snap2", "b"},
		{api.SnapshotNode, "snap3", "a"}, {api.SnapshotNode, "snap4", "b"},
		{api.BuildNode, "b1", "a"}, {api.BuildNode, "b2", "b"},
		{api.TemplateBuildNode, "app", "b"}, {api.TemplateBuildNode, "other", "a"},
	} {
		if got, err := c.fn(ctx, c.key); err != nil || got != c.want {
			t.Fatalf("route of %s = %q, %v; want %q", c.key, got, err, c.want)
		}
	}
	// An empty name matches no snapshot (unnamed ones have name "").
	if _, err := api.SnapshotNode(ctx, ""); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("SnapshotNode(\"\"): %v; want cluster.ErrNotFound", err)
	}
	toks, err := api.SandboxTokens(ctx)
	wantToks := []cluster.SandboxToken{{SandboxID: "s1", NodeID: "a", AccessToken: "tok-a"}, {SandboxID: "s2", NodeID: "b", AccessToken: "tok-b"}}
	if err != nil || !reflect.DeepEqual(toks, wantToks) {
		t.Fatalf("SandboxTokens = %+v, %v; want %+v", toks, err, wantToks)
	}
	if _, err := api.LostSandbox(ctx, "s1"); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("LostSandbox of a live sandbox: %v; want cluster.ErrNotFound", err)
	}
}

func TestWatchRoutes(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := ctxFor(t, 60*time.Second)
	url := srv.NewDatabase(t)
	api, node := openDB(t, url), openNode(t, url, "n1")
	wctx, stop := context.WithCancel(ctx)
	routes, err := api.WatchRoutes(wctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s1", "s2"} {
		if err := node.PutSandbox(ctx, storetest.SampleSandbox(id, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	if err := node.DeleteSandbox(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	expectRoute(t, routes, cluster.RouteChange{SandboxID: "s1"})
	// Deleting nothing announces nothing: the next change is s2's.
	if err := node.DeleteSandbox(ctx, "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second DeleteSandbox: %v; want ErrNotFound", err)
	}
	if err := api.DeleteSandbox(ctx, "s2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteSandbox of another node's sandbox: %v; want ErrNotFound", err)
	}
	if err := node.DeleteSandbox(ctx, "s2"); err != nil {
		t.Fatal(err)
	}
	expectRoute(t, routes, cluster.RouteChange{SandboxID: "s2"})

	// A reconnected listener asks for a resync.
	srv.Restart(t)
	expectRoute(t, routes, cluster.RouteChange{Resync: true})

	stop()
	for range routes { // closes once the context ended
	}
}

func TestReapLostNodes(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := ctxFor(t, 90*time.Second)
	url := srv.NewDatabase(t)
	api, n1, n2 := openDB(t, url), openNode(t, url, "n1"), openNode(t, url, "n2")
	// The api tier records a killed event for each running sandbox lost
	// with its node (the hook sees the row deleted).
	api.SetEventHook(func(_ context.Context, _ store.EventTx, c store.Change) ([]*store.Event, error) {
		if c.New != nil || c.Old == nil {
			return nil, nil
		}
		return []*store.Event{{ID: "lost-" + c.Old.ID, Type: "killed", SandboxID: c.Old.ID, Timestamp: time.Now()}}, nil
	})
	routes, err := api.WatchRoutes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	put := func(db *DB, id, state string) {
		t.Helper()
		s := storetest.SampleSandbox(id, time.Now())
		s.State = state
		if err := db.PutSandbox(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	put(n1, "run1", "running")
	put(n1, "run2", "running")
	put(n1, "paused1", "paused")
	put(n2, "run3", "running")
	for _, id := range []string{"n1", "n2"} {
		if _, err := api.Heartbeat(ctx, cluster.Node{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	// A lost record from two days ago is forgotten by the next reap.
	if _, err := api.pool.Exec(ctx, `INSERT INTO lost_sandboxes VALUES ('old', 'n9', now() - interval '25 hours', 'old')`); err != nil {
		t.Fatal(err)
	}

	if marked, err := api.ReapLostNodes(ctx, time.Second); err != nil || len(marked) != 0 {
		t.Fatalf("ReapLostNodes with fresh heartbeats = %+v, %v; want none", marked, err)
	}
	time.Sleep(1100 * time.Millisecond)
	if _, err := api.Heartbeat(ctx, cluster.Node{ID: "n2"}); err != nil {
		t.Fatal(err)
	}
	marked, err := api.ReapLostNodes(ctx, time.Second)
	if err != nil || len(marked) != 1 || marked[0].ID != "n1" || marked[0].State != cluster.StateLost ||
		marked[0].LostAt.IsZero() || marked[0].Age < time.Second {
		t.Fatalf("ReapLostNodes = %+v, %v; want n1, lost", marked, err)
	}

	// n1's running sandboxes are gone, announced and recorded; its paused
	// one and n2's stay.
	var got []string
	for range 2 {
		select {
		case c := <-routes:
			got = append(got, c.SandboxID)
		case <-time.After(15 * time.Second):
			t.Fatalf("route changes after the reap: %v; want run1 and run2", got)
		}
	}
	sort.Strings(got)
	if !reflect.DeepEqual(got, []string{"run1", "run2"}) {
		t.Fatalf("route changes %v; want run1, run2", got)
	}
	left, err := n1.ListSandboxes(ctx)
	if err != nil || len(left) != 1 || left[0].ID != "paused1" {
		t.Fatalf("n1's sandboxes after the reap = %v, %v; want paused1", ids(left), err)
	}
	if _, err := n2.GetSandbox(ctx, "run3"); err != nil {
		t.Fatalf("n2's sandbox after the reap: %v", err)
	}
	lost, err := api.LostSandbox(ctx, "run1")
	if err != nil || lost.NodeID != "n1" || lost.Reason != "node n1 was lost: no heartbeat for 1s" ||
		lost.At.IsZero() || lost.At.Location() != time.UTC {
		t.Fatalf("LostSandbox(run1) = %+v, %v", lost, err)
	}
	for _, id := range []string{"paused1", "run3", "old"} {
		if _, err := api.LostSandbox(ctx, id); !errors.Is(err, cluster.ErrNotFound) {
			t.Fatalf("LostSandbox(%s): %v; want cluster.ErrNotFound", id, err)
		}
	}
	if evs, err := api.ListEvents(ctx, store.EventQuery{Limit: 10, Asc: true}); err != nil || len(evs) != 2 ||
		evs[0].SandboxID+evs[1].SandboxID != "run1run2" && evs[0].SandboxID+evs[1].SandboxID != "run2run1" {
		t.Fatalf("events of the reap = %v, %v; want killed of run1 and run2", evs, err)
	}

	// The loss stays through n1's heartbeats, and is not reaped twice.
	if st, err := api.Heartbeat(ctx, cluster.Node{ID: "n1"}); err != nil || st != cluster.StateLost {
		t.Fatalf("Heartbeat of a lost node = %q, %v; want lost", st, err)
	}
	if _, err := api.pool.Exec(ctx, "UPDATE nodes SET heartbeat_at = now() - interval '1 minute' WHERE id = 'n1'"); err != nil {
		t.Fatal(err)
	}
	if marked, err := api.ReapLostNodes(ctx, time.Second); err != nil || len(marked) != 0 {
		t.Fatalf("second ReapLostNodes = %+v, %v; want none", marked, err)
	}

	// While another session holds the reaper's lock, a reaper does nothing.
	if _, err := api.pool.Exec(ctx, "UPDATE nodes SET heartbeat_at = now() - interval '1 minute' WHERE id = 'n2'"); err != nil {
		t.Fatal(err)
	}
	tx, err := n2.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", reapLock); err != nil {
		t.Fatal(err)
	}
	if marked, err := api.ReapLostNodes(ctx, time.Second); err != nil || marked != nil {
		t.Fatalf("ReapLostNodes while the lock is held = %+v, %v; want nil, nil", marked, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// Concurrent reapers (api instances) mark n2 once between them.
	const reapers = 6
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total []string
		errs  []error
	)
	for range reapers {
		db := openDB(t, url)
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := db.ReapLostNodes(ctx, time.Second)
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, err)
			for _, n := range m {
				total = append(total, n.ID)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil || !reflect.DeepEqual(total, []string{"n2"}) {
		t.Fatalf("concurrent reapers marked %v (%v); want n2 once", total, err)
	}
	expectRoute(t, routes, cluster.RouteChange{SandboxID: "run3"})
	if lost, err := api.LostSandbox(ctx, "run3"); err != nil || lost.Reason != "node n2 was lost: no heartbeat for 1s" {
		t.Fatalf("LostSandbox(run3) = %+v, %v", lost, err)
	}
	if _, err := api.ReapLostNodes(ctx, 0); err == nil {
		t.Fatal("ReapLostNodes with a zero bound succeeded")
	}
}

// openAt opens the database at url with only the first n migrations
// applied: a database written by an older binary.
func openAt(t *testing.T, url string, n int) *DB {
	t.Helper()
	ctx := ctxFor(t, 60*time.Second)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	d := &DB{pool: pool, log: testLogger(t), where: fmt.Sprintf("schema v%d", n), done: make(chan struct{})}
	t.Cleanup(func() { d.Close() })
	if err := d.migrateTo(ctx, migrations[:n]); err != nil {
		t.Fatalf("migrating to version %d: %v", n, err)
	}
	return d
}

// TestMigrateFrom2: a single host's database (schema 2, a daemon holding
// the lease) upgrades in place: its rows become node "", the scope of
// --role all, and the running daemon keeps its lease.
func TestMigrateFrom2(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := ctxFor(t, 60*time.Second)
	url := srv.NewDatabase(t)
	old := openAt(t, url, 2)
	for _, q := range []string{
		`INSERT INTO sandboxes (id, state, access_token, started_at) VALUES ('s1', 'running', 'tok', now()), ('s2', 'paused', '', now())`,
		`INSERT INTO snapshots (id, name, created_at) VALUES ('snap1', 'named', now())`,
		`INSERT INTO template_builds (id, template_id, created_at) VALUES ('b1', 'app', now())`,
		`INSERT INTO templates (name, hash) VALUES ('base', 'h')`,
		`INSERT INTO daemon_lease (owner, hostname, pid, started_at, heartbeat_at) VALUES ('old-owner', 'old-host', 42, now(), now())`,
	} {
		if _, err := old.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	db := openDB(t, url) // migrates to the current version
	if v, err := db.SchemaVersion(ctx); err != nil || v != len(migrations) || len(migrations) < 8 {
		t.Fatalf("SchemaVersion = %d, %v; want %d (at least 8)", v, err, len(migrations))
	}
	if sbs, err := db.ListSandboxes(ctx); err != nil || !reflect.DeepEqual(ids(sbs), []string{"s1", "s2"}) {
		t.Fatalf("--role all's sandboxes after the upgrade = %v, %v", ids(sbs), err)
	}
	if s, err := db.GetSnapshot(ctx, "snap1"); err != nil || s.Name != "named" {
		t.Fatalf("GetSnapshot after the upgrade = %+v, %v", s, err)
	}
	if b, err := db.GetTemplateBuild(ctx, "b1"); err != nil || b.TemplateID != "app" {
		t.Fatalf("GetTemplateBuild after the upgrade = %+v, %v", b, err)
	}
	if _, err := db.GetTemplate(ctx, "base"); err != nil {
		t.Fatalf("GetTemplate after the upgrade: %v", err)
	}
	if node, err := db.SandboxNode(ctx, "s1"); err != nil || node != "" {
		t.Fatalf("SandboxNode(s1) = %q, %v; want \"\"", node, err)
	}
	if sbs, err := openNode(t, url, "n1").ListSandboxes(ctx); err != nil || len(sbs) != 0 {
		t.Fatalf("node n1 sees the single host's sandboxes: %v, %v", ids(sbs), err)
	}
	// The old daemon's lease became node ""'s: a --role all daemon is
	// still refused, and the old one's heartbeat still finds its row.
	heldBy(t, openNode(t, url, ""), LeaseOptions{Hostname: "new-host"}, "old-host", 42)
	if tag, err := old.pool.Exec(ctx, "UPDATE daemon_lease SET heartbeat_at = now() WHERE owner = $1", "old-owner"); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("the old daemon's heartbeat after the upgrade: %v, %v", tag, err)
	}
}

// A late heartbeat (an older generation) does not overwrite a newer one;
// Touch refreshes a live node's heartbeat time only, and leaves a lost node
// lost.
func TestHeartbeatGenerationsAndTouch(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := ctxFor(t, 60*time.Second)
	db := openDB(t, srv.NewDatabase(t))
	n := cluster.Node{ID: "n1", Addr: "a:1", Runtime: "gvisor", Gen: 5, CPUs: 8, MemoryMB: 1024, Sandboxes: 5, StartedAt: time.Now()}
	if _, err := db.Heartbeat(ctx, n); err != nil {
		t.Fatal(err)
	}
	late := n
	late.Gen, late.Sandboxes = 3, 1
	if st, err := db.Heartbeat(ctx, late); err != nil || st != cluster.StateLive {
		t.Fatalf("late Heartbeat = %q, %v; want live, no error", st, err)
	}
	get := func() cluster.Node {
		t.Helper()
		ns, err := db.Nodes(ctx)
		if err != nil || len(ns) != 1 {
			t.Fatalf("Nodes = %v, %v", ns, err)
		}
		return ns[0]
	}
	if got := get(); got.Gen != 5 || got.Sandboxes != 5 {
		t.Errorf("after a late heartbeat: gen %d, sandboxes %d; want 5, 5", got.Gen, got.Sandboxes)
	}
	time.Sleep(300 * time.Millisecond)
	if err := db.Touch(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if got := get(); got.Age > 200*time.Millisecond || got.Gen != 5 {
		t.Errorf("after Touch: age %s, gen %d", got.Age, got.Gen)
	}
	if err := db.SetNodeState(ctx, "n1", cluster.StateLost); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := db.Touch(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if got := get(); got.State != cluster.StateLost || got.Age < 250*time.Millisecond {
		t.Errorf("Touch of a lost node: state %s, age %s; want it left lost and untouched", got.State, got.Age)
	}
	if err := db.Touch(ctx, "unknown"); err != nil {
		t.Errorf("Touch of an unknown node: %v", err)
	}
}
