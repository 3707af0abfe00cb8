package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func TestBootSnapshotServesCreates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A template without warm state (no interpreter) and without a warm
	// pool gets no boot snapshot: its cold boot is as fast.
	envPlain, _ := snapEnvWith(t, func(c *sandbox.Config) { c.BootSnapshots = true })
	if _, err := envPlain.Manager.PrepareBootSnapshot(ctx, "base"); err == nil || !strings.Contains(err.Error(), "no warm state") {
		t.Fatalf("boot snapshot of a plain template without a pool: %v", err)
	}
	if n := len(envPlain.Manager.List()); n != 0 {
		t.Fatalf("boot sandbox left: %d", n)
	}

	// Boot snapshots are used only when the config says so.
	envOff, rtOff := snapEnvWith(t, func(c *sandbox.Config) { c.WarmPool = map[string]int{"base": 1} })
	if _, err := envOff.Manager.PrepareBootSnapshot(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	create(t, envOff, sandbox.CreateRequest{Timeout: time.Minute})
	rtOff.Mu.Lock()
	if len(rtOff.Loaded) != 0 {
		t.Fatalf("restored with boot snapshots off: %v", rtOff.Loaded)
	}
	rtOff.Mu.Unlock()

	// (A pool size makes "base" eligible; the filler is not running.)
	env, rt := snapEnvWith(t, func(c *sandbox.Config) {
		c.BootSnapshots = true
		c.WarmPool = map[string]int{"base": 1}
	})
	hash, err := env.Manager.PrepareBootSnapshot(ctx, "base")
	if err != nil {
		t.Fatalf("PrepareBootSnapshot: %v", err)
	}
	dir := filepath.Join(env.DataDir, "snapshots", "boot-"+hash)
	for _, f := range []string{"manifest.json", "disk.img", "checkpoint/checkpoint.img"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("boot snapshot file %s: %v", f, err)
		}
	}
	// The boot sandbox is gone and was never listed.
	if n := len(env.Manager.List()); n != 0 {
		t.Fatalf("sandboxes after preparing = %d", n)
	}
	sb := create(t, env, sandbox.CreateRequest{Timeout: time.Minute, Secure: true, EnvVars: map[string]string{"A": "1"}})
	rt.Mu.Lock()
	loaded := append([]string(nil), rt.Loaded...)
	rt.Mu.Unlock()
	if len(loaded) != 1 || loaded[0] != dir {
		t.Fatalf("create did not restore the boot snapshot: %v", loaded)
	}
	in, _ := env.Agent.LastInit()
	if sb.TemplateID != "base" || in.EnvVars["E2B_SANDBOX_ID"] != sb.ID || in.EnvVars["A"] != "1" ||
		in.EnvVars["E2B_TEMPLATE_ID"] != "base" || in.AccessToken == nil || *in.AccessToken != sb.AccessToken {
		t.Fatalf("sandbox %+v, init %+v", sb, in)
	}
	// Other limits than the boot snapshot's: cold boot.
	create(t, env, sandbox.CreateRequest{Timeout: time.Minute, Limits: sandbox.Limits{MemoryMB: 1024}})
	// A failing restore falls back to a cold boot.
	rt.Mu.Lock()
	rt.CloneSavedErr = os.ErrPermission
	rt.Mu.Unlock()
	create(t, env, sandbox.CreateRequest{Timeout: time.Minute})
	rt.Mu.Lock()
	n := len(rt.Loaded)
	rt.Mu.Unlock()
	if n != 2 {
		t.Fatalf("CloneSaved calls = %d, want 2", n)
	}
	if got := len(env.Manager.List()); got != 3 {
		t.Fatalf("listed sandboxes = %d, want 3", got)
	}

	// A second prepare reuses the verified snapshot; a tampered one is
	// replaced; other builds' boot snapshots are removed.
	if err := os.WriteFile(filepath.Join(env.DataDir, "snapshots", "boot-oldhash.json"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	before := env.Agent.Inits
	env.Manager.PrepareBootSnapshots(ctx, []string{"base"})
	if len(env.Agent.Inits) != len(before) {
		t.Fatal("a verified boot snapshot was made again")
	}
	if _, err := os.Stat(filepath.Join(env.DataDir, "snapshots", "boot-oldhash.json")); !os.IsNotExist(err) {
		t.Fatalf("old boot snapshot kept: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "disk.img"), []byte("tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Manager.PrepareBootSnapshot(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "disk.img")); strings.Contains(string(b), "tampered") {
		t.Fatal("tampered boot snapshot reused")
	}
}

// TestBootSnapshotOfAnotherRuntimeBuild: a boot snapshot saved by another
// build of the runtime (runsc refuses images of another version) is made
// again at start instead of failing every create.
func TestBootSnapshotOfAnotherRuntimeBuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, rt := snapEnvWith(t, func(c *sandbox.Config) {
		c.BootSnapshots = true
		c.WarmPool = map[string]int{"base": 1}
	})
	rt.Mu.Lock()
	rt.Build = "runsc-sha256:1111"
	rt.Mu.Unlock()
	if _, err := env.Manager.PrepareBootSnapshot(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	before := len(env.Agent.Inits)
	if _, err := env.Manager.PrepareBootSnapshot(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	if len(env.Agent.Inits) != before {
		t.Fatal("a boot snapshot of the same runtime build was made again")
	}
	rt.Mu.Lock()
	rt.Build = "runsc-sha256:2222"
	rt.Mu.Unlock()
	if _, err := env.Manager.PrepareBootSnapshot(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	if len(env.Agent.Inits) == before {
		t.Fatal("a boot snapshot of another runtime build was reused")
	}
}
