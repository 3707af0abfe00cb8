package sandbox_test

import (
	"context"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

func TestFork(t *testing.T) {
	t.Parallel()
	env2 := forkEnv(t, false)
	ctx := context.Background()
	parent := create(t, env2, sandbox.CreateRequest{Timeout: time.Hour, Secure: true,
		Metadata: map[string]string{"k": "v"}, EnvVars: map[string]string{"A": "1"}})

	res, err := env2.Manager.Fork(ctx, parent.ID, 3, time.Minute)
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	if len(res) != 3 {
		t.Fatalf("results = %d", len(res))
	}
	seen := map[string]bool{parent.ID: true}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("child failed: %v", r.Err)
		}
		c := r.Sandbox
		if seen[c.ID] {
			t.Fatalf("duplicate id %s", c.ID)
		}
		seen[c.ID] = true
		if c.AccessToken == "" || c.AccessToken == parent.AccessToken {
			t.Fatalf("child token %q (parent %q)", c.AccessToken, parent.AccessToken)
		}
		if c.Metadata["k"] != "v" || c.State != sandbox.StateRunning || c.EndAt.After(time.Now().Add(2*time.Minute)) {
			t.Fatalf("child = %+v", c)
		}
		if env2.Network.SlotOf(c.ID) < 0 || env2.Network.SlotOf(c.ID) == env2.Network.SlotOf(parent.ID) {
			t.Fatalf("child %s slot %d", c.ID, env2.Network.SlotOf(c.ID))
		}
	}
	// Every child was re-initialised with its own id and token, authorised
	// by the parent's token.
	inits := env2.Agent.Inits
	if len(inits) != 4 { // parent create + 3 children
		t.Fatalf("inits = %d", len(inits))
	}
	for _, in := range inits[1:] {
		if !seen[in.EnvVars["E2B_SANDBOX_ID"]] || in.EnvVars["E2B_SANDBOX_ID"] == parent.ID || in.EnvVars["A"] != "1" {
			t.Fatalf("child init env = %v", in.EnvVars)
		}
	}
	// The parent comes back (in the background) with its id and expiry,
	// and the fork image is removed.
	deadline := time.Now().Add(3 * time.Second)
	for {
		got, err := get(env2.Manager, parent.ID)
		if err != nil {
			t.Fatal(err)
		}
		_, statErr := os.Stat(env2.DataDir + "/sandboxes/" + parent.ID + "/checkpoint")
		if got.Transition == "" && os.IsNotExist(statErr) {
			if got.State != sandbox.StateRunning || !got.EndAt.Equal(parent.EndAt) {
				t.Fatalf("parent after fork = %+v", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("parent not back or image kept: %+v, %v", got, statErr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Bad input.
	_, err = env2.Manager.Fork(ctx, parent.ID, 0, time.Minute)
	wantCode(t, err, http.StatusBadRequest, "count")
	_, err = env2.Manager.Fork(ctx, parent.ID, sandbox.MaxForkCount+1, time.Minute)
	wantCode(t, err, http.StatusBadRequest, "count")
	_, err = env2.Manager.Fork(ctx, "inope", 1, time.Minute)
	wantCode(t, err, http.StatusNotFound, "inope")
	if err := pause(env2.Manager, ctx, parent.ID); err != nil {
		t.Fatal(err)
	}
	_, err = env2.Manager.Fork(ctx, parent.ID, 1, time.Minute)
	wantCode(t, err, http.StatusConflict, "paused")
}

func TestForkChildFailureIsPerChild(t *testing.T) {
	t.Parallel()
	env2 := forkEnv(t, true)
	parent := create(t, env2, sandbox.CreateRequest{Timeout: time.Hour})
	res, err := env2.Manager.Fork(context.Background(), parent.ID, 2, time.Minute)
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	for _, r := range res {
		if r.Err == nil {
			t.Fatal("child started despite a failing clone")
		}
	}
	if len(env2.Manager.List()) != 1 {
		t.Fatalf("leftover sandboxes: %d", len(env2.Manager.List()))
	}
	if got, _ := get(env2.Manager, parent.ID); got.State != sandbox.StateRunning {
		t.Fatalf("parent state %q", got.State)
	}
}

// forkEnv is an Env whose runtime can checkpoint and clone and whose agent
// accepts /freeze.
func forkEnv(t *testing.T, failClone bool) *sandboxtest.Env {
	t.Helper()
	env, _ := forkEnvRuntime(t, failClone)
	return env
}

// forkEnvRuntime is forkEnv that also returns its runtime.
func forkEnvRuntime(t *testing.T, failClone bool) (*sandboxtest.Env, *cloneRuntime) {
	t.Helper()
	var rt *cloneRuntime
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) {
		rt = &cloneRuntime{CkRuntime: &ckRuntime{Runtime: c.Runtime.(*sandboxtest.Runtime)}, Fail: failClone}
		c.Runtime = rt
	})
	env.Agent.Extra = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/freeze" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return env, rt
}

// TestForkBeyondHostMemoryIsPerChild: a fork of more children than the
// host's memory holds starts those that fit and reports an error for each
// of the others (E2B's per-child results), and count may reach 100.
func TestForkBeyondHostMemoryIsPerChild(t *testing.T) {
	t.Parallel()
	var rt *cloneRuntime
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) {
		rt = &cloneRuntime{CkRuntime: &ckRuntime{Runtime: c.Runtime.(*sandboxtest.Runtime)}}
		c.Runtime = rt
		// Room for exactly two children of the default size.
		c.HostMemAvailable = func() (int64, error) {
			return int64(512+2*(sandbox.DefaultMemoryMB+64)+10) << 20, nil
		}
	})
	env.Agent.Extra = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/freeze" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	parent := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})
	res, err := env.Manager.Fork(context.Background(), parent.ID, 5, time.Minute)
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	if len(res) != 5 {
		t.Fatalf("%d results", len(res))
	}
	for i, r := range res {
		if i < 2 && (r.Err != nil || r.Sandbox == nil) {
			t.Fatalf("child %d: %v", i, r.Err)
		}
		if i >= 2 {
			wantCode(t, r.Err, http.StatusServiceUnavailable, "not enough host memory")
		}
	}
	if n := len(env.Manager.List()); n != 3 {
		t.Fatalf("%d sandboxes, want the parent and two children", n)
	}
	if sandbox.MaxForkCount != 100 {
		t.Fatalf("MaxForkCount = %d, E2B accepts up to 100", sandbox.MaxForkCount)
	}
}

// TestForkParentOperationLastsUntilChildrenRestored: the parent is back
// before its children, but its operation lasts until every child has
// restored from the fork image and the image is gone. A pause asked for in
// between waits for that; before, it ran at once, cleared the image under
// the children, and the fork's clean-up then removed the pause's new image.
func TestForkParentOperationLastsUntilChildrenRestored(t *testing.T) {
	t.Parallel()
	env, rt := forkEnvRuntime(t, false)
	ctx := context.Background()
	parent := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})
	gate := make(chan struct{})
	parentRestored := make(chan struct{})
	var once sync.Once
	rt.Mu.Lock()
	rt.RestoreHook = func(id string) error {
		if id == parent.ID {
			once.Do(func() { close(parentRestored) })
			return nil
		}
		<-gate // children wait until the test lets them go
		return nil
	}
	rt.Mu.Unlock()
	type forkRes struct {
		res []sandbox.ForkResult
		err error
	}
	forked := make(chan forkRes, 1)
	go func() {
		res, err := env.Manager.Fork(ctx, parent.ID, 2, time.Minute)
		forked <- forkRes{res, err}
	}()
	select {
	case <-parentRestored:
	case <-time.After(10 * time.Second):
		close(gate)
		t.Fatal("the fork parent was not restored")
	}
	time.Sleep(50 * time.Millisecond) // the parent's agent answers: it runs again
	paused := make(chan error, 1)
	go func() { paused <- pause(env.Manager, ctx, parent.ID) }()
	select {
	case err := <-paused:
		close(gate)
		t.Fatalf("a pause of the fork parent ran while its children were still restoring from the fork image (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(gate)
	fr := <-forked
	if fr.err != nil {
		t.Fatalf("Fork: %v", fr.err)
	}
	for _, r := range fr.res {
		if r.Err != nil {
			t.Fatalf("child: %v", r.Err)
		}
	}
	select {
	case err := <-paused:
		if err != nil {
			t.Fatalf("Pause after the fork: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pause did not run once the fork was done")
	}
	// The pause's image is its own: the fork's clean-up ran before it.
	time.Sleep(50 * time.Millisecond)
	if _, err := os.Stat(env.DataDir + "/sandboxes/" + parent.ID + "/checkpoint/checkpoint.img"); err != nil {
		t.Fatalf("the paused parent's image is gone: %v", err)
	}
}

// A private sandbox (allowPublicTraffic: false) has private children, each
// with its own traffic token; a public one has public children.
func TestForkKeepsTrafficPrivate(t *testing.T) {
	t.Parallel()
	env := forkEnv(t, false)
	ctx := context.Background()
	no := false
	private := create(t, env, sandbox.CreateRequest{Timeout: time.Hour, AllowPublicTraffic: &no})
	public := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})
	if private.TrafficToken == "" || public.TrafficToken != "" {
		t.Fatalf("parents' traffic tokens: private %q, public %q", private.TrafficToken, public.TrafficToken)
	}
	res, err := env.Manager.Fork(ctx, private.ID, 2, time.Minute)
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	seen := map[string]bool{private.TrafficToken: true}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("child failed: %v", r.Err)
		}
		tok := r.Sandbox.TrafficToken
		if tok == "" || seen[tok] {
			t.Fatalf("child of a private sandbox has traffic token %q (parent's or a sibling's: %v)", tok, seen[tok])
		}
		seen[tok] = true
		got, err := get(env.Manager, r.Sandbox.ID)
		if err != nil || got.TrafficToken != tok {
			t.Fatalf("stored child traffic token %q, %v; want %q", got.TrafficToken, err, tok)
		}
	}
	waitIdle(t, env.Manager, private.ID)
	res, err = env.Manager.Fork(ctx, public.ID, 1, time.Minute)
	if err != nil || res[0].Err != nil {
		t.Fatalf("Fork of the public sandbox: %v %+v", err, res)
	}
	if tok := res[0].Sandbox.TrafficToken; tok != "" {
		t.Fatalf("child of a public sandbox has traffic token %q", tok)
	}
}
