package sandbox_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// ckEnv is an Env whose runtime can checkpoint and whose agent answers
// /freeze with freezeStatus.
func ckEnv(t *testing.T, freezeStatus int) (*sandboxtest.Env, *ckRuntime) {
	t.Helper()
	var rt *ckRuntime
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) {
		rt = &ckRuntime{Runtime: c.Runtime.(*sandboxtest.Runtime)}
		c.Runtime = rt
	})
	env.Agent.Extra = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/freeze" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(freezeStatus)
		if freezeStatus == http.StatusConflict {
			_, _ = w.Write([]byte(`{"code":409,"message":"port 8000 (state LISTEN)"}`))
		}
	})
	return env, rt
}

func wantCode(t *testing.T, err error, code int, substr string) {
	t.Helper()
	ue, ok := sandbox.AsUserError(err)
	if !ok || ue.Code != code || !strings.Contains(ue.Msg, substr) {
		t.Fatalf("error = %v, want %d containing %q", err, code, substr)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	env, rt := ckEnv(t, http.StatusNoContent)
	ctx := context.Background()
	sb := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})

	if err := pause(env.Manager, ctx, sb.ID); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	got, _ := get(env.Manager, sb.ID)
	if got.State != sandbox.StatePaused {
		t.Fatalf("state after pause = %q", got.State)
	}
	if rec, _ := env.Store.GetSandbox(ctx, sb.ID); rec.State != sandbox.StatePaused {
		t.Fatalf("stored state = %q", rec.State)
	}
	wantCode(t, pause(env.Manager, ctx, sb.ID), http.StatusConflict, "already paused")
	wantCode(t, pause(env.Manager, ctx, "inope"), http.StatusNotFound, "inope")

	resumed, err := resume(env.Manager, ctx, sb.ID, time.Minute)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if resumed.State != sandbox.StateRunning || resumed.Transition != "" {
		t.Fatalf("resumed = %+v", resumed)
	}
	if ck, rs, sig := rt.Counts(); ck != 1 || rs != 1 || sig != 1 {
		t.Fatalf("checkpoints/restores/signals = %d/%d/%d", ck, rs, sig)
	}
	if _, err := os.Stat(filepath.Join(env.DataDir, "sandboxes", sb.ID, "checkpoint")); !os.IsNotExist(err) {
		t.Fatalf("checkpoint image kept after resume: %v", err)
	}
	_, err = resume(env.Manager, ctx, sb.ID, time.Minute)
	wantCode(t, err, http.StatusConflict, "already running")

	// Connect resumes a paused sandbox and says so.
	if err := pause(env.Manager, ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, wasPaused, err := connectTo(env.Manager, ctx, sb.ID, time.Minute); err != nil || !wasPaused {
		t.Fatalf("Connect on paused = %v, %v", wasPaused, err)
	}
	if _, wasPaused, err := connectTo(env.Manager, ctx, sb.ID, time.Minute); err != nil || wasPaused {
		t.Fatalf("Connect on running = %v, %v", wasPaused, err)
	}

	// Kill of a paused sandbox releases everything.
	if err := pause(env.Manager, ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := env.Manager.Kill(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := env.Manager.WaitTeardowns(ctx); err != nil { // the row goes in the background
		t.Fatal(err)
	}
	if env.Store.Has(sb.ID) || env.Network.SlotOf(sb.ID) != -1 || !env.Runtime.WasDestroyed(sb.ID) {
		t.Fatal("paused sandbox not fully released by kill")
	}
}

func TestPauseRefusedByAgentKeepsSandbox(t *testing.T) {
	t.Parallel()
	env, rt := ckEnv(t, http.StatusConflict)
	sb := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})
	wantCode(t, pause(env.Manager, context.Background(), sb.ID), http.StatusConflict, "port 8000")
	got, err := get(env.Manager, sb.ID)
	if err != nil || got.State != sandbox.StateRunning || got.Transition != "" {
		t.Fatalf("after refused pause: %+v, %v", got, err)
	}
	if ck, _, _ := rt.Counts(); ck != 0 {
		t.Fatal("checkpoint attempted after the agent refused")
	}
}

func TestFailedCheckpointRemovesSandbox(t *testing.T) {
	t.Parallel()
	env, rt := ckEnv(t, http.StatusNoContent)
	rt.FailCk = true
	sb := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})
	if err := pause(env.Manager, context.Background(), sb.ID); err == nil {
		t.Fatal("Pause succeeded with a failing checkpoint")
	}
	if _, err := get(env.Manager, sb.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("sandbox still listed after a failed checkpoint: %v", err)
	}
	if env.Store.Has(sb.ID) {
		t.Fatal("row kept after a failed checkpoint")
	}
}

func TestAutoPauseOnTimeout(t *testing.T) {
	t.Parallel()
	env, _ := ckEnv(t, http.StatusNoContent)
	sb := create(t, env, sandbox.CreateRequest{Timeout: 200 * time.Millisecond, AutoPause: true, AutoResume: true})
	if sb.OnTimeout != sandbox.OnTimeoutPause || !sb.AutoResume {
		t.Fatalf("lifecycle = %q autoResume=%v", sb.OnTimeout, sb.AutoResume)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		got, err := get(env.Manager, sb.ID)
		if err != nil {
			t.Fatalf("auto-paused sandbox vanished: %v", err)
		}
		if got.State == sandbox.StatePaused && got.Transition == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not paused 3 s after a 200 ms timeout: %+v", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Traffic (the proxy's EnsureRunning) resumes it.
	got, err := ensureRunning(env.Manager, context.Background(), sb.ID)
	if err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("EnsureRunning = %+v, %v", got, err)
	}
}

func TestEnsureRunningWithoutAutoResume(t *testing.T) {
	t.Parallel()
	env, _ := ckEnv(t, http.StatusNoContent)
	sb := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})
	if err := pause(env.Manager, context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	_, err := ensureRunning(env.Manager, context.Background(), sb.ID)
	wantCode(t, err, http.StatusBadGateway, "autoResume")
}

func TestNoCheckpointRuntime(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	sb := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})
	wantCode(t, pause(env.Manager, context.Background(), sb.ID), http.StatusNotImplemented, `"fake" runtime`)
	_, err := env.Manager.Create(context.Background(), sandbox.CreateRequest{Timeout: time.Hour, AutoPause: true})
	wantCode(t, err, http.StatusNotImplemented, `"fake" runtime`)
}

func TestRestoreKeepsPaused(t *testing.T) {
	t.Parallel()
	env, _ := ckEnv(t, http.StatusNoContent)
	ctx := context.Background()
	now := time.Now().UTC()
	id := "ipausedrow"
	_ = env.Store.PutSandbox(ctx, &store.Sandbox{ID: id, TemplateID: "base", State: sandbox.StatePaused, Slot: 7,
		GuestIP: "127.0.0.1", StartedAt: now.Add(-time.Hour), EndAt: now.Add(-time.Minute), Metadata: map[string]string{}})
	env.Network.Namespace[id] = true
	img := filepath.Join(env.DataDir, "sandboxes", id, "checkpoint")
	if err := os.MkdirAll(img, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(img, "checkpoint.img"), []byte("img"), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := env.Manager.Reattach(ctx)
	if err != nil || len(rep.Reattached) != 1 {
		t.Fatalf("Restore = %+v, %v", rep, err)
	}
	got, err := get(env.Manager, id)
	if err != nil || got.State != sandbox.StatePaused {
		t.Fatalf("paused sandbox after restore: %+v, %v", got, err)
	}
	// Its past end time does not kill it: paused sandboxes do not expire.
	time.Sleep(50 * time.Millisecond)
	if _, err := get(env.Manager, id); err != nil {
		t.Fatalf("paused sandbox expired: %v", err)
	}
	if _, err := resume(env.Manager, ctx, id, time.Minute); err != nil {
		t.Fatalf("Resume after restore: %v", err)
	}
}

// TestReaperSparesSandboxBeingCheckpointed: pause and fork stop the runtime
// sandbox while checkpointing it; the reaper, seeing it stopped on two
// passes, must not remove it (it once did, and the fork parent was lost).
func TestReaperSparesSandboxBeingCheckpointed(t *testing.T) {
	t.Parallel()
	env, crt := forkEnvRuntime(t, false)
	rt := crt.CkRuntime
	ctx := context.Background()
	sb, err := env.Manager.Create(ctx, sandbox.CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	inCk := make(chan struct{})
	release := make(chan struct{})
	rt.Mu.Lock()
	rt.CkHook = func(id string) {
		rt.SetState(id, runtime.StateStopped) // as runsc checkpoint does
		close(inCk)
		<-release
	}
	rt.Mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := env.Manager.Fork(ctx, sb.ID, 1, time.Minute)
		done <- err
	}()
	select {
	case <-inCk:
	case err := <-done:
		t.Fatalf("fork returned before checkpointing: %v", err)
	}
	for i := 0; i < 3; i++ {
		if err := env.Manager.ReapStopped(ctx); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("fork: %v", err)
	}
	got, err := get(env.Manager, sb.ID)
	if err != nil {
		t.Fatalf("fork parent was reaped while being checkpointed: %v", err)
	}
	if got.State != sandbox.StateRunning && got.State != sandbox.StatePaused {
		t.Fatalf("parent state %q", got.State)
	}
}

// TestForkParentKilledDuringItsRestore: a fork parent killed while it is
// being restored in the background (its restore then fails) stays killed:
// no paused store row comes back for it.
func TestForkParentKilledDuringItsRestore(t *testing.T) {
	t.Parallel()
	env, crt := forkEnvRuntime(t, false)
	rt := crt.CkRuntime
	ctx := context.Background()
	sb, err := env.Manager.Create(ctx, sandbox.CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	inRestore := make(chan struct{})
	release := make(chan struct{})
	rt.Mu.Lock()
	rt.RestoreHook = func(id string) error {
		if id != sb.ID {
			return nil // the child
		}
		close(inRestore)
		<-release
		return sandboxtest.ErrBoom // as runsc does once Kill removed its state
	}
	rt.Mu.Unlock()
	if _, err := env.Manager.Fork(ctx, sb.ID, 1, time.Minute); err != nil {
		t.Fatalf("fork: %v", err)
	}
	select {
	case <-inRestore:
	case <-time.After(10 * time.Second):
		t.Fatal("the parent's restore never started")
	}
	if err := env.Manager.Kill(ctx, sb.ID); err != nil {
		t.Fatalf("kill during the parent's restore: %v", err)
	}
	close(release)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := env.Manager.Close(cctx); err != nil { // waits for the restore goroutine
		t.Fatal(err)
	}
	if env.Store.Has(sb.ID) {
		t.Fatal("the killed fork parent's store row came back (as paused)")
	}
	if _, err := get(env.Manager, sb.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("killed parent: Get = %v, want not found", err)
	}
}

// A Kill while a pause is checkpointing: the pause must not write the
// killed sandbox's row back (it answers 404), and a Live held across the
// Kill answers 404 to every later call.
func TestKillDuringPauseLeavesNoRow(t *testing.T) {
	env, rt := ckEnv(t, http.StatusNoContent)
	ctx := context.Background()
	sb := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})
	in, rel := make(chan struct{}), make(chan struct{})
	rt.Mu.Lock()
	rt.CkHook = func(string) { close(in); <-rel }
	rt.Mu.Unlock()
	e, err := env.Manager.Lookup(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Pause(ctx) }()
	<-in
	if err := env.Manager.Kill(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	close(rel)
	if err := <-done; !sandbox.IsNotFound(err) {
		t.Errorf("pause of a sandbox killed under it = %v, want not found", err)
	}
	if err := env.Manager.WaitTeardowns(ctx); err != nil { // the row goes in the background
		t.Fatal(err)
	}
	if env.Store.Has(sb.ID) {
		t.Errorf("the killed sandbox's store row came back after its pause finished")
	}
	if err := e.SetTimeout(ctx, time.Minute); !sandbox.IsNotFound(err) {
		t.Errorf("SetTimeout on a Live held across its Kill = %v, want not found", err)
	}
	if _, err := e.Resume(ctx, time.Minute); !sandbox.IsNotFound(err) {
		t.Errorf("Resume on a Live held across its Kill = %v, want not found", err)
	}
}
