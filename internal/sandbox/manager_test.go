package sandbox_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/store"
)

func create(t *testing.T, env *sandboxtest.Env, req sandbox.CreateRequest) *sandbox.Sandbox {
	t.Helper()
	if req.Timeout == 0 {
		req.Timeout = time.Minute
	}
	sb, err := env.Manager.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return sb
}

func TestCreateGetListKill(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	ctx := context.Background()
	sb := create(t, env, sandbox.CreateRequest{
		Metadata: map[string]string{"k": "v"},
		EnvVars:  map[string]string{"FOO": "bar"},
		Secure:   true,
	})
	if !regexp.MustCompile(`^i[a-z0-9]{20}$`).MatchString(sb.ID) {
		t.Fatalf("id %q does not match i+20 [a-z0-9]", sb.ID)
	}
	if sb.TemplateID != "base" || sb.State != sandbox.StateRunning || sb.CPUCount != 2 || sb.MemoryMB != 512 || sb.DiskSizeMB != 10240 {
		t.Fatalf("unexpected sandbox: %+v", sb)
	}
	if len(sb.AccessToken) != 64 {
		t.Fatalf("access token %q: want 64 hex chars", sb.AccessToken)
	}
	spec := env.Runtime.Specs[sb.ID]
	if spec.Hostname != sb.ID || spec.RootFS != "/nonexistent/rootfs" || spec.NetNSPath != "/var/run/netns/airlock-"+sb.ID ||
		spec.Dir != filepath.Join(env.DataDir, "sandboxes", sb.ID) || spec.AgentPath != "/nonexistent/airlock-envd" ||
		strings.Join(spec.Nameservers, ",") != "192.0.2.53" || spec.Resources.CPUCount != 2 || spec.Resources.MemoryMB != 512 {
		t.Fatalf("unexpected runtime spec: %+v", spec)
	}
	init, ok := env.Agent.LastInit()
	if !ok {
		t.Fatal("agent got no /init")
	}
	if init.AccessToken == nil || *init.AccessToken != sb.AccessToken {
		t.Fatalf("init token = %v, want %q", init.AccessToken, sb.AccessToken)
	}
	wantEnv := map[string]string{"FOO": "bar", "E2B_SANDBOX": "true", "E2B_SANDBOX_ID": sb.ID, "E2B_TEMPLATE_ID": "base"}
	for k, v := range wantEnv {
		if init.EnvVars[k] != v {
			t.Errorf("init env %s = %q, want %q", k, init.EnvVars[k], v)
		}
	}
	if init.DefaultUser != "user" || init.DefaultWorkdir != "/home/user" || time.Since(init.Timestamp) > time.Minute {
		t.Errorf("unexpected init defaults: %+v", init)
	}
	if !env.Store.Has(sb.ID) {
		t.Fatal("sandbox not persisted")
	}
	got, err := get(env.Manager, sb.ID)
	if err != nil || got.Metadata["k"] != "v" {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if l := env.Manager.List(); len(l) != 1 || l[0].ID != sb.ID {
		t.Fatalf("List = %+v", l)
	}
	if err := env.Manager.Kill(ctx, sb.ID); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := env.Manager.WaitTeardowns(ctx); err != nil { // the row goes in the background
		t.Fatal(err)
	}
	if !env.Runtime.WasDestroyed(sb.ID) || env.Network.SlotOf(sb.ID) != -1 || env.Store.Has(sb.ID) {
		t.Fatal("kill did not release runtime, network and row")
	}
	if _, err := get(env.Manager, sb.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("Get after kill: %v, want 404", err)
	}
	err = env.Manager.Kill(ctx, sb.ID)
	if ue, ok := sandbox.AsUserError(err); !ok || ue.Code != http.StatusNotFound {
		t.Fatalf("second Kill = %v, want 404 user error", err)
	}
}

func TestLowestFreeSlot(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	var ids []string
	for range 3 {
		ids = append(ids, create(t, env, sandbox.CreateRequest{}).ID)
	}
	for i, id := range ids {
		if env.Network.SlotOf(id) != i {
			t.Fatalf("sandbox %d got slot %d", i, env.Network.SlotOf(id))
		}
	}
	if err := env.Manager.Kill(context.Background(), ids[1]); err != nil {
		t.Fatal(err)
	}
	// The slot is free once the kill's background teardown is done.
	if err := env.Manager.WaitTeardowns(context.Background()); err != nil {
		t.Fatal(err)
	}
	sb := create(t, env, sandbox.CreateRequest{})
	if env.Network.SlotOf(sb.ID) != 1 {
		t.Fatalf("new sandbox got slot %d, want 1", env.Network.SlotOf(sb.ID))
	}
}

func TestConcurrentCreatesGetDistinctSlots(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			_, err := env.Manager.Create(context.Background(), sandbox.CreateRequest{Timeout: time.Minute})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent create: %v", err)
		}
	}
	if n := len(env.Manager.List()); n != 8 {
		t.Fatalf("%d sandboxes, want 8", n)
	}
}

func waitGone(m *sandbox.Manager, id string, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if _, err := get(m, id); sandbox.IsNotFound(err) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

func TestTimeoutExpiry(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	sb := create(t, env, sandbox.CreateRequest{Timeout: 300 * time.Millisecond})
	if _, err := get(env.Manager, sb.ID); err != nil {
		t.Fatal("gone too early")
	}
	if !waitGone(env.Manager, sb.ID, 2*time.Second) {
		t.Fatal("sandbox did not expire")
	}
	deadline := time.Now().Add(time.Second)
	for env.Store.Has(sb.ID) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !env.Runtime.WasDestroyed(sb.ID) || env.Store.Has(sb.ID) {
		t.Fatal("expired sandbox not released")
	}
}

func TestSetTimeoutExtendsAndShortens(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	ctx := context.Background()
	sb := create(t, env, sandbox.CreateRequest{Timeout: 300 * time.Millisecond})
	if err := setTimeout(env.Manager, ctx, sb.ID, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond)
	got, err := get(env.Manager, sb.ID)
	if err != nil {
		t.Fatal("extended sandbox expired early")
	}
	row, _ := env.Store.GetSandbox(ctx, sb.ID)
	if !row.EndAt.Equal(got.EndAt) || time.Until(got.EndAt) < 3*time.Second {
		t.Fatalf("end not persisted/extended: row %v mem %v", row.EndAt, got.EndAt)
	}
	if err := setTimeout(env.Manager, ctx, sb.ID, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if !waitGone(env.Manager, sb.ID, 2*time.Second) {
		t.Fatal("shortened timeout did not fire")
	}
	err = setTimeout(env.Manager, ctx, "inope", time.Second)
	if !sandbox.IsNotFound(err) {
		t.Fatalf("SetTimeout unknown = %v", err)
	}
	if err := setTimeout(env.Manager, ctx, sb.ID, -time.Second); err == nil {
		t.Fatal("negative timeout accepted")
	}
}

func TestConnectAndRefreshOnlyExtend(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	ctx := context.Background()
	sb := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})
	got, resumed, err := connectTo(env.Manager, ctx, sb.ID, time.Second)
	if err != nil || resumed {
		t.Fatalf("Connect = %v, %v", resumed, err)
	}
	if !got.EndAt.Equal(sb.EndAt) {
		t.Fatalf("connect shortened the timeout: %v → %v", sb.EndAt, got.EndAt)
	}
	if err := refresh(env.Manager, ctx, sb.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	got, _ = get(env.Manager, sb.ID)
	if !got.EndAt.Equal(sb.EndAt) {
		t.Fatal("refresh shortened the timeout")
	}
	got, _, err = connectTo(env.Manager, ctx, sb.ID, 2*time.Hour)
	if err != nil || time.Until(got.EndAt) < 110*time.Minute {
		t.Fatalf("connect did not extend: %v %v", got.EndAt, err)
	}
	if _, _, err := connectTo(env.Manager, ctx, "inope", time.Second); !sandbox.IsNotFound(err) {
		t.Fatalf("connect unknown = %v", err)
	}
}

func TestRestore(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	ctx := context.Background()
	now := time.Now().UTC()
	put := func(id string, slot int, end time.Time) {
		_ = env.Store.PutSandbox(ctx, &store.Sandbox{ID: id, TemplateID: "base", State: "running", Slot: slot,
			GuestIP: "127.0.0.1", StartedAt: now.Add(-time.Minute), EndAt: end, Metadata: map[string]string{}})
	}
	// alive: running in runtime, netns exists, not expired.
	put("ialive", 3, now.Add(time.Hour))
	env.Runtime.States["ialive"] = runtime.StateRunning
	env.Network.Slots["ialive"] = 3
	env.Network.Namespace["ialive"] = true
	// expired but still running.
	put("iexpired", 4, now.Add(-time.Second))
	env.Runtime.States["iexpired"] = runtime.StateRunning
	env.Network.Namespace["iexpired"] = true
	// dead: runtime lost it.
	put("idead", 5, now.Add(time.Hour))
	env.Network.Namespace["idead"] = true
	// a template build's step sandbox: alive, but its build died with the
	// daemon.
	_ = env.Store.PutSandbox(ctx, &store.Sandbox{ID: "ibuild", TemplateID: "build-x", State: "running", Slot: 6,
		GuestIP: "127.0.0.1", StartedAt: now, EndAt: now.Add(time.Hour), Metadata: map[string]string{sandbox.BuildKey: "x"}})
	env.Runtime.States["ibuild"] = runtime.StateRunning
	env.Network.Slots["ibuild"] = 6
	env.Network.Namespace["ibuild"] = true
	// leaks: runtime sandbox and netns without rows.
	env.Runtime.States["ileakrt"] = runtime.StateRunning
	env.Network.Namespace["ileakns"] = true

	rep, err := env.Manager.Reattach(ctx)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if strings.Join(rep.Reattached, ",") != "ialive" {
		t.Fatalf("reattached = %v", rep.Reattached)
	}
	if len(rep.Removed) != 3 || len(rep.Leaked) != 2 {
		t.Fatalf("report = %+v", rep)
	}
	if _, err := get(env.Manager, "ialive"); err != nil {
		t.Fatalf("alive sandbox not managed: %v", err)
	}
	for _, id := range []string{"iexpired", "idead", "ibuild"} {
		if env.Store.Has(id) || !env.Runtime.WasDestroyed(id) || env.Network.Namespace[id] {
			t.Errorf("%s not cleaned up", id)
		}
	}
	if env.Runtime.Running("ileakrt") || env.Network.Namespace["ileakns"] {
		t.Error("leaks not destroyed")
	}
	// A new sandbox must not take the re-attached sandbox's slot.
	for range 5 {
		sb := create(t, env, sandbox.CreateRequest{})
		if env.Network.SlotOf(sb.ID) == 3 {
			t.Fatal("slot of re-attached sandbox reused")
		}
	}
	// The re-armed timer works.
	if err := setTimeout(env.Manager, ctx, "ialive", 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if !waitGone(env.Manager, "ialive", 2*time.Second) {
		t.Fatal("re-attached sandbox did not expire")
	}
}

func TestCloseRefusesCreatesAndKillAll(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	ctx := context.Background()
	a := create(t, env, sandbox.CreateRequest{})
	b := create(t, env, sandbox.CreateRequest{})
	if err := env.Manager.KillAll(ctx); err != nil {
		t.Fatal(err)
	}
	if len(env.Manager.List()) != 0 || !env.Runtime.WasDestroyed(a.ID) || !env.Runtime.WasDestroyed(b.ID) {
		t.Fatal("KillAll left sandboxes")
	}
	_ = env.Manager.Close(ctx)
	_, err := env.Manager.Create(ctx, sandbox.CreateRequest{Timeout: time.Minute})
	if ue, ok := sandbox.AsUserError(err); !ok || ue.Code != 503 {
		t.Fatalf("create after close = %v", err)
	}
}

func TestHostNameservers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "resolv.conf")
	_ = os.WriteFile(p, []byte("# c\nnameserver 127.0.0.53\nnameserver 192.0.2.1\nsearch x\nnameserver ::1\nnameserver 2001:db8::1\n"), 0o644)
	if got := strings.Join(sandbox.HostNameservers(p), ","); got != "192.0.2.1,2001:db8::1" {
		t.Fatalf("got %s", got)
	}
	_ = os.WriteFile(p, []byte("nameserver 127.0.0.53\n"), 0o644)
	if got := strings.Join(sandbox.HostNameservers(p), ","); got != "1.1.1.1,8.8.8.8" {
		t.Fatalf("loopback-only: got %s", got)
	}
	if got := strings.Join(sandbox.HostNameservers(filepath.Join(dir, "missing")), ","); got != "1.1.1.1,8.8.8.8" {
		t.Fatalf("missing: got %s", got)
	}
}

func TestCloseWaitsForTimeoutKills(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	sb := create(t, env, sandbox.CreateRequest{Timeout: 50 * time.Millisecond})
	env.Runtime.SetDestroyDelay(400 * time.Millisecond)
	time.Sleep(150 * time.Millisecond) // the timer fired; Destroy is sleeping
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := env.Manager.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !env.Runtime.WasDestroyed(sb.ID) || env.Store.Has(sb.ID) {
		t.Fatal("Close returned before the timeout kill finished")
	}
}
