package sandbox_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// rbRuntime adds runtime.Rebooter to the fake runtime.
type rbRuntime struct {
	*sandboxtest.Runtime
	// mu guards the fields below.
	mu               sync.Mutex
	shutdowns, boots int
}

// Caps states what rbRuntime adds to the fake runtime.
func (r *rbRuntime) Caps() runtime.Caps {
	c := r.Runtime.Caps()
	c.Rebooter = r
	return c
}

func (r *rbRuntime) Shutdown(ctx context.Context, id, dir string) error {
	r.mu.Lock()
	r.shutdowns++
	r.mu.Unlock()
	r.Forget(id)
	return nil
}

func (r *rbRuntime) Boot(ctx context.Context, spec runtime.Spec) error {
	r.mu.Lock()
	r.boots++
	r.mu.Unlock()
	r.SetState(spec.ID, runtime.StateRunning)
	return nil
}

func TestPauseFilesystemAndResume(t *testing.T) {
	t.Parallel()
	rt := &rbRuntime{Runtime: sandboxtest.NewRuntime()}
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) { c.Runtime = rt })
	proc := &fakeProcess{readyAfter: 1}
	withProcess(env, proc)
	ctx := context.Background()
	sb := create(t, env, sandbox.CreateRequest{Secure: true, EnvVars: map[string]string{"KEEP": "me"}})

	if err := pauseFilesystem(env.Manager, ctx, sb.ID); err != nil {
		t.Fatalf("PauseFilesystem: %v", err)
	}
	proc.mu.Lock()
	started := strings.Join(proc.started, ",")
	proc.mu.Unlock()
	if !strings.Contains(started, "root||-sync") {
		t.Errorf("the guest was not synced as root before the shutdown: %q", started)
	}
	got, err := get(env.Manager, sb.ID)
	if err != nil || got.State != sandbox.StatePaused {
		t.Fatalf("after the pause: %+v %v, want paused", got, err)
	}
	if rec, _ := env.Store.GetSandbox(ctx, sb.ID); rec == nil || rec.State != sandbox.StatePaused || !strings.Contains(rec.Extra, `"diskOnly":true`) {
		t.Fatalf("stored record %+v, want paused and diskOnly", rec)
	}
	if rt.Running(sb.ID) {
		t.Error("the runtime sandbox still runs after a filesystem-only pause")
	}
	if err := pauseFilesystem(env.Manager, ctx, sb.ID); !isStatus(err, http.StatusConflict) {
		t.Errorf("second pause: %v, want 409", err)
	}

	inits := len(env.Agent.Inits)
	res, err := resume(env.Manager, ctx, sb.ID, time.Minute)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if res.State != sandbox.StateRunning || rt.boots != 1 {
		t.Fatalf("after resume: state %s, boots %d", res.State, rt.boots)
	}
	// The fresh agent got the sandbox's identity again.
	init, _ := env.Agent.LastInit()
	if len(env.Agent.Inits) != inits+1 || init.AccessToken == nil || *init.AccessToken != sb.AccessToken ||
		init.EnvVars["KEEP"] != "me" || init.EnvVars["E2B_SANDBOX_ID"] != sb.ID {
		t.Errorf("/init after the boot: %+v, want the token, the env vars and the sandbox id", init)
	}
	if rec, _ := env.Store.GetSandbox(ctx, sb.ID); rec == nil || rec.State != sandbox.StateRunning || strings.Contains(rec.Extra, "diskOnly") {
		t.Fatalf("stored record after resume %+v", rec)
	}
}

func TestFilesystemPauseNeedsRuntime(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	sb := create(t, env, sandbox.CreateRequest{})
	if err := pauseFilesystem(env.Manager, context.Background(), sb.ID); !isStatus(err, http.StatusNotImplemented) {
		t.Fatalf("PauseFilesystem on a runtime without Rebooter: %v, want 501", err)
	}
	_, err := env.Manager.Create(context.Background(), sandbox.CreateRequest{Timeout: time.Minute, AutoPause: true, AutoPauseDiskOnly: true})
	if !isStatus(err, http.StatusNotImplemented) {
		t.Fatalf("create with a filesystem-only timeout pause: %v, want 501", err)
	}
}

// The lifecycle's keepMemory: false makes the timeout pause keep only the
// disk.
func TestTimeoutPauseFilesystemOnly(t *testing.T) {
	t.Parallel()
	rt := &rbRuntime{Runtime: sandboxtest.NewRuntime()}
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) { c.Runtime = rt })
	withProcess(env, &fakeProcess{readyAfter: 1})
	sb, err := env.Manager.Create(context.Background(), sandbox.CreateRequest{Timeout: 300 * time.Millisecond, AutoPause: true, AutoPauseDiskOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := get(env.Manager, sb.ID)
		if err == nil && got.State == sandbox.StatePaused && got.Transition == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not paused after its timeout: %+v %v", got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.shutdowns != 1 {
		t.Errorf("shutdowns = %d, want 1 (a filesystem-only pause)", rt.shutdowns)
	}
}

func isStatus(err error, code int) bool {
	ue, ok := sandbox.AsUserError(err)
	return ok && ue.Code == code
}
