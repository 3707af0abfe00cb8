//go:build linux

package identity

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
)

func TestRunAs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: switches thread credentials")
	}
	nobody, err := Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, p := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = os.Chmod(filepath.Dir(dir), 0o700) })

	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 20 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			errs <- RunAs(nobody, func() error {
				return os.WriteFile(filepath.Join(dir, "u"+string(rune('a'+i))), nil, 0o644)
			})
		}()
		go func() {
			defer wg.Done()
			errs <- os.WriteFile(filepath.Join(dir, "r"+string(rune('a'+i))), nil, 0o644)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		fi, _ := de.Info()
		uid := fi.Sys().(*syscall.Stat_t).Uid
		want := uint32(0)
		if de.Name()[0] == 'u' {
			want = 65534
		}
		if uid != want {
			t.Fatalf("%s owned by %d, want %d", de.Name(), uid, want)
		}
	}
	// Permissions are enforced: nobody cannot write into a root 0755 dir.
	locked := filepath.Join(dir, "locked")
	if err := os.Mkdir(locked, 0o755); err != nil {
		t.Fatal(err)
	}
	err = RunAs(nobody, func() error { return os.WriteFile(filepath.Join(locked, "x"), nil, 0o644) })
	if !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("want permission error, got %v", err)
	}
	if os.Geteuid() != 0 || os.Getegid() != 0 {
		t.Fatal("process credentials changed")
	}
}

func TestRunner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: switches thread credentials")
	}
	nobody, err := Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(nobody)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // one thread, many calls, each as nobody
		var uid, gid int
		if err := r.Do(func() error { uid, gid = syscall.Geteuid(), syscall.Getegid(); return nil }); err != nil {
			t.Fatal(err)
		}
		if uid != 65534 || gid != 65534 {
			t.Fatalf("Do ran as %d:%d, want 65534:65534", uid, gid)
		}
	}
	if os.Geteuid() != 0 || os.Getegid() != 0 {
		t.Fatal("process credentials changed")
	}
	r.Close()
	r.Close()
	if err := r.Do(func() error { t.Error("ran after Close"); return nil }); err == nil {
		t.Fatal("Do after Close succeeded")
	}
	// No switch needed: Do runs the function directly.
	root, err := Lookup("root")
	if err != nil {
		t.Fatal(err)
	}
	direct, err := NewRunner(root)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if err := direct.Do(func() error { return errors.New("direct") }); err == nil || err.Error() != "direct" {
		t.Fatalf("direct Do = %v", err)
	}
}

// TestRunAsReusesThreads: sequential calls as one user reuse a thread;
// concurrent ones still run in parallel on threads of their own; threads are
// never shared between different credentials, and the idle ones are bounded.
func TestRunAsReusesThreads(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: switches thread credentials")
	}
	nobody, err := Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		tid, euid, egid int
		groups          []int
	}
	probe := func(u *User) seen {
		t.Helper()
		var s seen
		if err := RunAs(u, func() error {
			s.tid, s.euid, s.egid = syscall.Gettid(), os.Geteuid(), os.Getegid()
			var gerr error
			s.groups, gerr = syscall.Getgroups()
			slices.Sort(s.groups)
			return gerr
		}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := probe(nobody), probe(nobody)
	if a.tid != b.tid {
		t.Fatalf("two calls in a row ran on threads %d and %d, want one reused", a.tid, b.tid)
	}
	if a.euid != 65534 || b.euid != 65534 {
		t.Fatalf("euid %d, %d; want 65534", a.euid, b.euid)
	}

	// Other supplementary groups: another thread, with exactly those groups.
	other := *nobody
	other.Groups = []uint32{4242}
	o := probe(&other)
	if o.tid == a.tid {
		t.Fatal("a thread was reused for other credentials")
	}
	if len(o.groups) != 2 || o.groups[0] != 4242 || o.groups[1] != int(nobody.GID) {
		t.Fatalf("groups %v, want [4242 %d]", o.groups, nobody.GID)
	}
	if p := probe(nobody); len(p.groups) != 1 || p.groups[0] != int(nobody.GID) {
		t.Fatalf("nobody's thread has groups %v after another user's call", p.groups)
	}

	// Concurrent calls do not wait for each other.
	const n = 6
	var wg sync.WaitGroup
	all := make(chan struct{})
	var mu sync.Mutex
	tids := map[int]bool{}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = RunAs(nobody, func() error {
				mu.Lock()
				tids[syscall.Gettid()] = true
				if len(tids) == n {
					close(all)
				}
				mu.Unlock()
				<-all // every call is running at once
				return nil
			})
		}()
	}
	wg.Wait()
	if len(tids) != n {
		t.Fatalf("%d concurrent calls ran on %d threads", n, len(tids))
	}
	if got := threads.idleCount(); got > maxIdle || len(threads.idle[credsKey(nobody)]) > maxIdlePerCreds {
		t.Fatalf("%d idle threads kept (%d for nobody)", got, len(threads.idle[credsKey(nobody)]))
	}
	if tids[syscall.Gettid()] {
		t.Fatal("the caller's thread ran as nobody")
	}
	// A panic in fn is an error; the thread keeps serving.
	if err := RunAs(nobody, func() error { panic("boom") }); err == nil {
		t.Fatal("a panic was not reported")
	}
	if s := probe(nobody); s.euid != 65534 {
		t.Fatalf("after a panic: euid %d", s.euid)
	}
	if os.Geteuid() != 0 || os.Getegid() != 0 {
		t.Fatal("process credentials changed")
	}
}
