package sandbox_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/store"
)

func snapEnv(t *testing.T) (*sandboxtest.Env, *snapRuntime) {
	t.Helper()
	return snapEnvWith(t, nil)
}

// snapEnvWith is snapEnv with a config hook (sandboxtest.SnapEnv).
func snapEnvWith(t *testing.T, mutate func(*sandbox.Config)) (*sandboxtest.Env, *snapRuntime) {
	t.Helper()
	return sandboxtest.SnapEnv(t, mutate)
}

// waitIdle waits until id has no operation in progress.
func waitIdle(t *testing.T, m *sandbox.Manager, id string) *sandbox.Sandbox {
	t.Helper()
	return sandboxtest.WaitIdle(t, m, id)
}

func TestSnapshotCreateRestoreDelete(t *testing.T) {
	t.Parallel()
	env, rt := snapEnv(t)
	ctx := context.Background()
	src := create(t, env, sandbox.CreateRequest{Timeout: time.Hour, Secure: true, EnvVars: map[string]string{"A": "1"}})

	info, err := env.Manager.CreateSnapshot(ctx, src.ID, "snap-one")
	if err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	if info.ID == "" || info.Name != "snap-one" || info.SandboxID != src.ID || info.TemplateID != "base" || info.SizeBytes <= 0 {
		t.Fatalf("snapshot = %+v", info)
	}
	dir := filepath.Join(env.DataDir, "snapshots", info.ID)
	for _, f := range []string{"manifest.json", "disk.img", "checkpoint/checkpoint.img"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("snapshot file %s: %v", f, err)
		}
	}
	// The source keeps running with its id and expiry; its own checkpoint
	// is removed once it is back (the snapshot keeps its link).
	back := waitIdle(t, env.Manager, src.ID)
	if back.State != sandbox.StateRunning || !back.EndAt.Equal(src.EndAt) {
		t.Fatalf("source after snapshot = %+v", back)
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoint/checkpoint.img")); err != nil {
		t.Fatalf("snapshot image gone with the source's checkpoint: %v", err)
	}

	// Listed, by sandbox and by name or id.
	for _, f := range []sandbox.SnapshotFilter{{}, {SandboxID: src.ID}, {Name: "snap-one"}, {Name: info.ID}} {
		got, err := env.Manager.ListSnapshots(ctx, f)
		if err != nil || len(got) != 1 || got[0].ID != info.ID {
			t.Fatalf("ListSnapshots(%+v) = %v, %v", f, got, err)
		}
	}
	if got, _ := env.Manager.ListSnapshots(ctx, sandbox.SnapshotFilter{SandboxID: "iother"}); len(got) != 0 {
		t.Fatalf("filter by other sandbox: %v", got)
	}

	// Two sandboxes from it (by name and by id): fresh identities, the
	// snapshot's env plus the request's, authorised by the saved token.
	seen := map[string]bool{src.ID: true}
	for _, ref := range []string{"snap-one", info.ID} {
		sb := create(t, env, sandbox.CreateRequest{TemplateID: ref, Timeout: time.Minute, Secure: true,
			EnvVars: map[string]string{"B": "2"}, Metadata: map[string]string{"m": ref}})
		if seen[sb.ID] || sb.AccessToken == "" || sb.AccessToken == src.AccessToken {
			t.Fatalf("sandbox from snapshot: id %s token %q", sb.ID, sb.AccessToken)
		}
		seen[sb.ID] = true
		if sb.TemplateID != info.ID || sb.Metadata["m"] != ref || sb.State != sandbox.StateRunning {
			t.Fatalf("sandbox from snapshot = %+v", sb)
		}
		in, _ := env.Agent.LastInit()
		if in.EnvVars["E2B_SANDBOX_ID"] != sb.ID || in.EnvVars["A"] != "1" || in.EnvVars["B"] != "2" ||
			in.EnvVars["E2B_TEMPLATE_ID"] != info.ID || in.AccessToken == nil || *in.AccessToken != sb.AccessToken {
			t.Fatalf("init of sandbox from snapshot = %+v", in)
		}
	}
	rt.Mu.Lock()
	loaded := append([]string(nil), rt.Loaded...)
	rt.Mu.Unlock()
	if len(loaded) != 2 || loaded[0] != dir {
		t.Fatalf("CloneSaved sources = %v, want 2 × %s", loaded, dir)
	}

	// A sandbox created from a snapshot can itself be forked and
	// snapshotted (its template is the one under the snapshot).
	kid := create(t, env, sandbox.CreateRequest{TemplateID: info.ID, Timeout: time.Minute})
	res, err := env.Manager.Fork(ctx, kid.ID, 1, time.Minute)
	if err != nil || res[0].Err != nil {
		t.Fatalf("fork of a sandbox from a snapshot: %v %+v", err, res)
	}
	waitIdle(t, env.Manager, kid.ID)
	second, err := env.Manager.CreateSnapshot(ctx, kid.ID, "snap-one")
	if err != nil {
		t.Fatalf("snapshot of a sandbox from a snapshot: %v", err)
	}
	waitIdle(t, env.Manager, kid.ID)
	// The name moved to the newer snapshot; the old one keeps its id.
	if got, _ := env.Manager.GetSnapshot(ctx, "snap-one"); got == nil || got.ID != second.ID {
		t.Fatalf("name resolves to %+v, want %s", got, second.ID)
	}
	if got, _ := env.Manager.GetSnapshot(ctx, info.ID); got == nil || got.Name != "" {
		t.Fatalf("old snapshot = %+v, want unnamed", got)
	}

	// Delete refuses while a create restores from it, then removes it.
	rt.Mu.Lock()
	rt.Gate = make(chan struct{})
	gate := rt.Gate
	rt.Mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := env.Manager.Create(ctx, sandbox.CreateRequest{TemplateID: info.ID, Timeout: time.Minute})
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		rt.Mu.Lock()
		n := len(rt.Loaded)
		rt.Mu.Unlock()
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("create from snapshot did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	wantCode(t, env.Manager.DeleteSnapshot(ctx, info.ID), http.StatusConflict, "being restored")
	close(gate)
	if err := <-done; err != nil {
		t.Fatalf("create while delete was refused: %v", err)
	}
	if err := env.Manager.DeleteSnapshot(ctx, info.ID); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("snapshot dir after delete: %v", err)
	}
	wantCode(t, env.Manager.DeleteSnapshot(ctx, info.ID), http.StatusNotFound, info.ID)
	_, err = env.Manager.Create(ctx, sandbox.CreateRequest{TemplateID: info.ID, Timeout: time.Minute})
	wantCode(t, err, http.StatusNotFound, "not found")
}

func TestSnapshotBadInput(t *testing.T) {
	t.Parallel()
	env, _ := snapEnv(t)
	ctx := context.Background()
	sb := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})

	_, err := env.Manager.CreateSnapshot(ctx, "inope", "")
	wantCode(t, err, http.StatusNotFound, "inope")
	_, err = env.Manager.CreateSnapshot(ctx, sb.ID, "Not Valid")
	wantCode(t, err, http.StatusBadRequest, "invalid snapshot name")
	_, err = env.Manager.CreateSnapshot(ctx, sb.ID, "base")
	wantCode(t, err, http.StatusConflict, "taken by a template")
	// A sandbox whose runtime stopped (dead, not yet reaped).
	env.Runtime.SetState(sb.ID, runtime.StateStopped)
	_, err = env.Manager.CreateSnapshot(ctx, sb.ID, "")
	wantCode(t, err, http.StatusConflict, "not running")
	env.Runtime.SetState(sb.ID, runtime.StateRunning)
	if err := pause(env.Manager, ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	_, err = env.Manager.CreateSnapshot(ctx, sb.ID, "")
	wantCode(t, err, http.StatusConflict, "paused")
	wantCode(t, env.Manager.DeleteSnapshot(ctx, "snope"), http.StatusNotFound, "snope")

	// A runtime that checkpoints but cannot save layers answers 501.
	env2, _ := ckEnv(t, http.StatusNoContent)
	sb2 := create(t, env2, sandbox.CreateRequest{Timeout: time.Hour})
	_, err = env2.Manager.CreateSnapshot(ctx, sb2.ID, "")
	wantCode(t, err, http.StatusNotImplemented, "cannot snapshot")
}

func TestInitSnapshotsVerifiesAndCollects(t *testing.T) {
	t.Parallel()
	env, _ := snapEnv(t)
	ctx := context.Background()
	sb := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})
	good, err := env.Manager.CreateSnapshot(ctx, sb.ID, "good")
	if err != nil {
		t.Fatal(err)
	}
	waitIdle(t, env.Manager, sb.ID)
	bad, err := env.Manager.CreateSnapshot(ctx, sb.ID, "bad")
	if err != nil {
		t.Fatal(err)
	}
	waitIdle(t, env.Manager, sb.ID)
	snaps := filepath.Join(env.DataDir, "snapshots")
	// Corrupt one snapshot's layer, leave a half-written dir and an orphan,
	// and a row whose files are gone.
	if err := os.WriteFile(filepath.Join(snaps, bad.ID, "disk.img"), []byte("tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{".tmp-sabc", "sorphan"} {
		if err := os.MkdirAll(filepath.Join(snaps, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Store.PutSnapshot(ctx, &store.Snapshot{ID: "sgone", CreatedAt: time.Now(), Spec: "{}"}); err != nil {
		t.Fatal(err)
	}

	rep, err := env.Manager.InitSnapshots(ctx)
	if err != nil {
		t.Fatalf("InitSnapshots: %v", err)
	}
	if len(rep.Verified) != 1 || rep.Verified[0] != good.ID || len(rep.Invalid) != 1 || rep.Invalid[0] != bad.ID ||
		len(rep.Removed) != 1 || rep.Removed[0] != "sgone" || len(rep.Collected) != 2 {
		t.Fatalf("report = %+v", rep)
	}
	for _, d := range []string{".tmp-sabc", "sorphan"} {
		if _, err := os.Stat(filepath.Join(snaps, d)); !os.IsNotExist(err) {
			t.Fatalf("%s not collected: %v", d, err)
		}
	}
	// The invalid snapshot is never used; it is listed with its problem
	// and can be deleted.
	_, err = env.Manager.Create(ctx, sandbox.CreateRequest{TemplateID: "bad", Timeout: time.Minute})
	wantCode(t, err, http.StatusConflict, "failed verification")
	if got, _ := env.Manager.GetSnapshot(ctx, "bad"); got == nil || got.Problem == "" {
		t.Fatalf("invalid snapshot info = %+v", got)
	}
	create(t, env, sandbox.CreateRequest{TemplateID: "good", Timeout: time.Minute})
	if err := env.Manager.DeleteSnapshot(ctx, "bad"); err != nil {
		t.Fatal(err)
	}
}

// A create from a named snapshot honours allowPublicTraffic: false with a
// fresh traffic token, whatever the snapshotted sandbox was.
func TestSnapshotCreateHonoursPrivateTraffic(t *testing.T) {
	t.Parallel()
	env, _ := snapEnv(t)
	ctx := context.Background()
	src := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})
	info, err := env.Manager.CreateSnapshot(ctx, src.ID, "snap-private")
	if err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	waitIdle(t, env.Manager, src.ID)
	no, yes := false, true
	a := create(t, env, sandbox.CreateRequest{TemplateID: info.ID, AllowPublicTraffic: &no})
	b := create(t, env, sandbox.CreateRequest{TemplateID: "snap-private", AllowPublicTraffic: &no})
	if a.TrafficToken == "" || b.TrafficToken == "" || a.TrafficToken == b.TrafficToken {
		t.Fatalf("private creates from a snapshot: traffic tokens %q and %q", a.TrafficToken, b.TrafficToken)
	}
	if got, err := get(env.Manager, a.ID); err != nil || got.TrafficToken != a.TrafficToken {
		t.Fatalf("stored traffic token %q, %v; want %q", got.TrafficToken, err, a.TrafficToken)
	}
	for _, req := range []sandbox.CreateRequest{{TemplateID: info.ID}, {TemplateID: info.ID, AllowPublicTraffic: &yes}} {
		if sb := create(t, env, req); sb.TrafficToken != "" {
			t.Fatalf("public create from a snapshot has traffic token %q", sb.TrafficToken)
		}
	}
}
