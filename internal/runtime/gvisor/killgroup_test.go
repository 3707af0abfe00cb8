//go:build linux

package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// bareNetNS is a network namespace with only its loopback: enough for a
// sandbox that is never reached over the network, and no address that
// another test on the host could also use.
func bareNetNS(t *testing.T, name string) string {
	t.Helper()
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name)
	if serr := netns.Set(orig); serr != nil {
		t.Fatalf("restoring netns: %v", serr)
	}
	if err != nil {
		t.Fatalf("creating netns: %v", err)
	}
	ns.Close()
	t.Cleanup(func() { _ = netns.DeleteNamed(name) })
	return "/var/run/netns/" + name
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestStopKillsTheKillGroup starts a real sandbox on a hybrid cgroup host:
// every process runsc started for it is in its kill group, and Stop kills
// them through it, even when none is in the sandbox's cgroup v1 any more
// (which Stop read and signalled pid by pid before kill groups). Destroy
// removes the group.
func TestStopKillsTheKillGroup(t *testing.T) {
	needRoot(t)
	if !hybridCgroups() {
		t.Skip("needs a hybrid cgroup host: v1 controllers at /sys/fs/cgroup, v2 at " + unifiedRoot)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newRuntime(t, filepath.Join(t.TempDir(), "runsc"))
	spec := testSpec(t, "killgroup", bareNetNS(t, fmt.Sprintf("altestg-kg%d", os.Getpid())))
	if err := r.Start(ctx, spec); err != nil {
		t.Fatalf("Start: %v", err)
	}
	destroyed := false
	t.Cleanup(func() {
		if !destroyed {
			_ = r.Destroy(context.Background(), spec.ID, spec.Dir)
		}
	})

	v1File := r.cgroupProcsFile(spec.ID)
	if v1File == "" {
		t.Fatal("the sandbox has no cgroup v1")
	}
	group := r.killGroupDir(spec.ID)
	var v1, inGroup []int
	for deadline := time.Now().Add(10 * time.Second); ; { // stubs may still be starting
		var err error
		if v1, err = readPIDs(v1File); err != nil {
			t.Fatal(err)
		}
		if inGroup, err = readPIDs(filepath.Join(group, "cgroup.procs")); err != nil {
			t.Fatalf("kill group: %v", err)
		}
		slices.Sort(v1)
		slices.Sort(inGroup)
		if len(v1) > 0 && slices.Equal(v1, inGroup) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(v1) < 2 || !slices.Equal(v1, inGroup) {
		t.Fatalf("processes in the sandbox's cgroup %v, in its kill group %v: want the same, at least the Sentry and the gofer", v1, inGroup)
	}

	// Every process leaves the v1 cgroup that the per-pid path reads, for
	// its parent (the cgroup parent's): only the kill group still holds
	// them. (Moving one is not enough: the rest die with the Sentry.)
	// A process may still be starting (a stub forked meanwhile lands in
	// the v1 cgroup too): move until it stays empty.
	parent := filepath.Join(filepath.Dir(filepath.Dir(v1File)), "cgroup.procs")
	for deadline := time.Now().Add(10 * time.Second); ; {
		now, err := readPIDs(v1File)
		if err != nil {
			t.Fatal(err)
		}
		if len(now) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pids %v still in %s", now, v1File)
		}
		for _, pid := range now {
			if err := os.WriteFile(parent, []byte(strconv.Itoa(pid)), 0); err != nil && !errors.Is(err, syscall.ESRCH) {
				t.Fatalf("moving pid %d out of %s: %v", pid, v1File, err)
			}
		}
	}

	if err := r.Stop(ctx, spec.ID, spec.Dir); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range v1 {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d (of %v) still alive 10 s after Stop", pid, v1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	if err := r.WaitStopped(ctx, spec.ID, spec.Dir); err != nil {
		t.Fatalf("WaitStopped: %v", err)
	}
	destroyed = true
	if err := r.Destroy(ctx, spec.ID, spec.Dir); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if _, err := os.Stat(group); !os.IsNotExist(err) {
		t.Errorf("kill group %s after Destroy: %v, want it gone", group, err)
	}
}
