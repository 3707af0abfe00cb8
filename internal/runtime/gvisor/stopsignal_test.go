//go:build linux

package gvisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestStopWithoutCgroupKill starts a real sandbox on a hybrid cgroup host
// with its kill group's cgroup.kill replaced by a plain file (a bind mount
// over it): Stop must still kill every process of the sandbox, because it
// signals them through pidfds and takes no cgroup_mutex (issue 24). Before,
// Stop wrote "1" to cgroup.kill, here the plain file, and nothing died.
func TestStopWithoutCgroupKill(t *testing.T) {
	needRoot(t)
	if !hybridCgroups() {
		t.Skip("needs a hybrid cgroup host: v1 controllers at /sys/fs/cgroup, v2 at " + unifiedRoot)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newRuntime(t, filepath.Join(t.TempDir(), "runsc"))
	spec := testSpec(t, "stopsignal", bareNetNS(t, fmt.Sprintf("altestg-ss%d", os.Getpid())))
	if err := r.Start(ctx, spec); err != nil {
		t.Fatalf("Start: %v", err)
	}
	group := r.killGroupDir(spec.ID)
	kill := filepath.Join(group, "cgroup.kill")
	fake := filepath.Join(t.TempDir(), "cgroup.kill")
	if err := os.WriteFile(fake, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(fake, kill, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mounting over %s: %v", kill, err)
	}
	mounted := true
	unmount := func() {
		if mounted {
			if err := unix.Unmount(kill, 0); err != nil {
				t.Errorf("unmounting %s: %v", kill, err)
			}
			mounted = false
		}
	}
	t.Cleanup(func() {
		unmount()
		_ = r.Destroy(context.Background(), spec.ID, spec.Dir)
	})

	var pids []int
	for deadline := time.Now().Add(10 * time.Second); len(pids) < 2 && time.Now().Before(deadline); {
		var err error
		if pids, err = readPIDs(filepath.Join(group, "cgroup.procs")); err != nil {
			t.Fatalf("kill group: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(pids) < 2 {
		t.Fatalf("kill group holds %v: want at least the Sentry and the gofer", pids)
	}
	if err := r.Stop(ctx, spec.ID, spec.Dir); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				if data, _ := os.ReadFile(fake); len(data) > 0 {
					t.Fatalf("pid %d (of %v) alive 10 s after Stop, which wrote %q to cgroup.kill (a plain file here) instead of signalling", pid, pids, data)
				}
				t.Fatalf("pid %d (of %v) still alive 10 s after Stop", pid, pids)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	unmount()
	if err := r.WaitStopped(ctx, spec.ID, spec.Dir); err != nil {
		t.Fatalf("WaitStopped: %v", err)
	}
}
