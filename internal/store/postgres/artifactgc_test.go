package postgres

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/artifactgc"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/postgres/pgtest"
	"github.com/airlock-sandbox/airlock/internal/store/storetest"
)

var _ artifactgc.Refs = (*DB)(nil)

// TestArtifactGCRefs: the references are every node's rows, whatever the
// handle's scope.
func TestArtifactGCRefs(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	ctx := ctxFor(t, 60*time.Second)
	a, b, all := openNode(t, url, "a"), openNode(t, url, "b"), openNode(t, url, "")
	now := time.Now()
	put := func(db *DB, id, state, extra string) {
		s := storetest.SampleSandbox(id, now)
		s.State, s.Extra = state, extra
		if err := db.PutSandbox(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	put(a, "run-a", "running", `{"image":"paused/run-a"}`)
	put(a, "paused-a", "paused", `{"image":"paused/paused-a"}`)
	put(b, "resuming-b", "resuming", `{"image":"paused/resuming-b"}`)
	put(all, "paused-local", "paused", "")
	for _, s := range []struct {
		db *DB
		id string
	}{{a, "snap-a"}, {b, "snap-b"}} {
		if err := s.db.PutSnapshot(ctx, &store.Snapshot{ID: s.id, Name: s.id, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	for name, hash := range map[string]string{"base": "h1", "base:v2": "h1", "app": "h2", "legacy": ""} {
		if err := b.PutTemplate(ctx, &store.Template{Name: name, Hash: hash, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	for _, db := range []*DB{a, all} {
		hashes, err := db.TemplateHashes(ctx)
		slices.Sort(hashes)
		if err != nil || !slices.Equal(hashes, []string{"h1", "h2"}) {
			t.Errorf("TemplateHashes = %v, %v", hashes, err)
		}
		paused, err := db.PausedSandboxes(ctx)
		want := map[string]string{"paused-a": `{"image":"paused/paused-a"}`, "resuming-b": `{"image":"paused/resuming-b"}`, "paused-local": ""}
		if err != nil || !maps.Equal(paused, want) {
			t.Errorf("PausedSandboxes = %v, %v; want %v", paused, err, want)
		}
		snaps, err := db.SnapshotIDs(ctx)
		slices.Sort(snaps)
		if err != nil || !slices.Equal(snaps, []string{"snap-a", "snap-b"}) {
			t.Errorf("SnapshotIDs = %v, %v", snaps, err)
		}
	}
}

// TestArtifactGCAgentBlobs: the agent builds recorded by sandbox rows in
// any state (a running sandbox records its last pause's) and by snapshot
// rows, across nodes, once each; an unparsable document yields its text
// (no digest: the collection then keeps every blob).
func TestArtifactGCAgentBlobs(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	ctx := ctxFor(t, 60*time.Second)
	a, b, all := openNode(t, url, "a"), openNode(t, url, "b"), openNode(t, url, "")
	now := time.Now()
	put := func(db *DB, id, state, extra string) {
		s := storetest.SampleSandbox(id, now)
		s.State, s.Extra = state, extra
		if err := db.PutSandbox(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	put(a, "run-a", "running", `{"image":"paused/run-a/1","agentBlob":"sha256:aa"}`)
	put(a, "paused-a", "paused", `{"image":"paused/paused-a/1","agentBlob":"sha256:bb"}`)
	put(b, "paused-b", "paused", `{"image":"paused/paused-b/1","agentBlob":"sha256:aa"}`)
	put(b, "plain-b", "paused", `{"image":"paused/plain-b/1"}`)
	if err := b.PutSnapshot(ctx, &store.Snapshot{ID: "snap-b", Name: "snap-b", CreatedAt: now, Spec: `{"agentBlob":"sha256:cc","agentPath":"x"}`}); err != nil {
		t.Fatal(err)
	}
	for _, db := range []*DB{a, all} {
		got, err := db.AgentBlobs(ctx)
		slices.Sort(got)
		if err != nil || !slices.Equal(got, []string{"sha256:aa", "sha256:bb", "sha256:cc"}) {
			t.Errorf("AgentBlobs = %v, %v", got, err)
		}
	}
	if got := agentBlobs([]string{`{"agentBlob":`}); len(got) != 1 || got[0] != `{"agentBlob":` {
		t.Errorf("an unparsable document: %v", got)
	}
}

// TestArtifactGCLock: of two instances one holds the lock; it is free
// again when the holder releases it, and when the holder's connection
// dies (another instance then takes over).
func TestArtifactGCLock(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	ctx := ctxFor(t, 60*time.Second)
	a, b := openDB(t, url), openDB(t, url)

	try := func(db *DB, want bool) func() {
		t.Helper()
		release, held, err := db.TryArtifactGCLock(ctx)
		if err != nil || held != want {
			t.Fatalf("TryArtifactGCLock = %v, %v; want held %v", held, err, want)
		}
		return release
	}
	releaseA := try(a, true)
	try(b, false)
	releaseA()
	releaseB := try(b, true)
	try(a, false)

	// The holder's connection dies (its host crashed, a network cut): the
	// server ends the session, and the lock is free.
	var n int
	if err := a.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND classid::bigint = $1 AND objid::bigint = $2`,
		artifactGCLock>>32, artifactGCLock&0xffffffff).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminating the holder's session: %d, %v", n, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var releaseA2 func()
	for {
		release, held, err := a.TryArtifactGCLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if held {
			releaseA2 = release
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lock of a terminated session was not freed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The old holder's release meets a dead connection: logged, no harm to
	// the new holder.
	releaseB()
	try(b, false)
	releaseA2()
	try(b, true)()
}
