//go:build e2e

package gohttp

// Kill semantics (issue 24, issue 26 item 5): a kill answers once the
// sandbox is unreachable (its processes SIGKILLed, its address silent) and the
// rest of its teardown follows in the background; a namespace that cannot
// be removed at once does not fail the kill; a daemon SIGKILLed mid-teardown
// finishes it at its next start.

import (
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// guestAddr finds the sandbox's guest address: the host veth whose peer is
// in the sandbox's namespace holds the first address of the sandbox's /30,
// the guest the next one (inside, gVisor's netstack owns eth0 and the
// namespace shows no address).
func guestAddr(t *testing.T, id string) string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, " link-netns "+netnsPrefix()+id) {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		ifname, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		addr, err := exec.Command("ip", "-4", "-o", "addr", "show", "dev", ifname).Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range strings.Fields(string(addr)) {
			if p, err := netip.ParsePrefix(w); err == nil {
				return p.Addr().Next().String()
			}
		}
	}
	t.Fatalf("no host veth with its peer in %s", netnsPrefix()+id)
	return ""
}

// sandboxProcesses counts the host processes of sandbox id: its Sentry
// (and systrap stubs) and gofer, not a runsc command about it.
func sandboxProcesses(id string) int {
	out, _ := exec.Command("pgrep", "-f", "^runsc-(sandbox|gofer) .*"+id).Output()
	return len(strings.Fields(string(out)))
}

// killTimed deletes sandbox id and returns the status and how long it took.
func (e env) killTimed(t *testing.T, id string) (int, time.Duration) {
	t.Helper()
	t0 := time.Now()
	r := e.api(t, http.MethodDelete, "/sandboxes/"+id, nil)
	return r.status, time.Since(t0)
}

// answers reports whether anything accepts a TCP connection at addr:port.
func answers(addr, port string) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, port), 500*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// teardownDone reports whether nothing of sandbox id is left on the host.
func teardownDone(t *testing.T, id string) (bool, string) {
	hs := readHostState(t)
	switch {
	case hs.netns[id]:
		return false, "netns"
	case hs.dirs[id]:
		return false, "sandbox dir"
	case hs.runsc[id]:
		return false, "runsc state"
	case len(cgroupLeft(id)) > 0:
		return false, "cgroup"
	}
	if journalOpen(id) {
		return false, "teardown journal entry"
	}
	return true, ""
}

// pinTeardown makes a file in sandbox id's directory immutable, so its
// teardown cannot remove the directory and keeps retrying until unpin (also
// run at cleanup). It returns the directory.
func pinTeardown(t *testing.T, id string) (dir string, unpin func()) {
	t.Helper()
	dir = filepath.Join(os.Getenv("AIRLOCK_E2E_DATA_DIR"), "sandboxes", id)
	pin := filepath.Join(dir, "teardown-pin")
	if err := os.WriteFile(pin, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chattr", "+i", pin).CombinedOutput(); err != nil {
		t.Fatalf("chattr +i %s: %v %s", pin, err, out)
	}
	unpin = func() { _ = exec.Command("chattr", "-i", pin).Run() }
	t.Cleanup(unpin)
	return dir, unpin
}

func (e env) requireGone(t *testing.T, id string) {
	t.Helper()
	if st, _ := e.sandboxState(t, id); st != http.StatusNotFound {
		t.Errorf("GET after kill: %d, want 404", st)
	}
	if e.listedRunning(t)[id] {
		t.Error("killed sandbox still listed")
	}
}

func TestKillAnswersOnceUnreachable(t *testing.T) {
	e := loadEnv(t)
	s := e.createV1(t, 300, nil)
	if r := e.run(t, s, "", "nohup sleep 600 >/dev/null 2>&1 & echo started", time.Minute); r.stdout != "started\n" {
		t.Fatalf("starting a background process: %+v", r)
	}
	ip := guestAddr(t, s.SandboxID)
	if !answers(ip, envdPort) {
		t.Fatalf("the agent does not answer on %s:%s before the kill", ip, envdPort)
	}
	status, took := e.killTimed(t, s.SandboxID)
	if status != http.StatusNoContent {
		t.Fatalf("DELETE: %d, want 204", status)
	}
	t.Logf("kill answered in %v", took)
	// Right when the kill answered: every process of the sandbox is gone or
	// has SIGKILL pending (the kill no longer waits for their exit), and
	// nothing answers on its address.
	if left := notKilled(s.SandboxID); len(left) > 0 {
		t.Errorf("processes of the sandbox alive without SIGKILL when the kill answered: %v", left)
	}
	if answers(ip, envdPort) {
		t.Errorf("%s:%s still answers after the kill", ip, envdPort)
	}
	if !waitFor(30*time.Second, 50*time.Millisecond, func() bool { return sandboxProcesses(s.SandboxID) == 0 }) {
		out, _ := exec.Command("pgrep", "-af", "runsc.*"+s.SandboxID).Output()
		t.Errorf("runsc processes of the sandbox still alive 30 s after the kill: %s", out)
	}
	e.requireGone(t, s.SandboxID)
	var what string
	if !waitFor(2*time.Minute, 250*time.Millisecond, func() (ok bool) { ok, what = teardownDone(t, s.SandboxID); return ok }) {
		t.Errorf("teardown not finished 2 min after the kill: %s left", what)
	}
}

// The namespace is held on purpose while the sandbox is killed: a process
// inside it (ip netns exec), an open file of it, and a second mount stacked
// on its name. The kill answers 204 at once (it answered 500 "device or
// resource busy" before), and the name goes.
func TestKillBusyNetns(t *testing.T) {
	e := loadEnv(t)
	s := e.createV1(t, 300, nil)
	ns := netnsPrefix() + s.SandboxID
	path := filepath.Join("/var/run/netns", ns)
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("ip", "netns", "exec", ns, "sleep", "300")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if out, err := exec.Command("mount", "--bind", path, path).CombinedOutput(); err != nil {
		t.Fatalf("stacking a mount on %s: %v %s", path, err, out)
	}
	t.Cleanup(func() {
		for range 4 {
			_ = syscall.Unmount(path, syscall.MNT_DETACH)
		}
		_ = os.Remove(path)
	})

	r := e.api(t, http.MethodDelete, "/sandboxes/"+s.SandboxID, nil)
	if r.status != http.StatusNoContent {
		t.Fatalf("DELETE with the namespace held: %d %s, want 204", r.status, r.body)
	}
	e.requireGone(t, s.SandboxID)
	if !waitFor(2*time.Minute, 250*time.Millisecond, func() bool {
		_, err := os.Lstat(path)
		return os.IsNotExist(err)
	}) {
		t.Errorf("%s still there 2 min after the kill, while held", path)
	}
	// The holders let go: nothing refers to the namespace any more.
	_ = holder.Process.Kill()
	_ = holder.Wait()
	f.Close()
	if !waitFor(30*time.Second, 250*time.Millisecond, func() bool { return !netnsInUse(st.Ino) }) {
		t.Errorf("namespace %d still in use after its holders let go", st.Ino)
	}
	var what string
	if !waitFor(2*time.Minute, 250*time.Millisecond, func() (ok bool) { ok, what = teardownDone(t, s.SandboxID); return ok }) {
		t.Errorf("teardown not finished: %s left", what)
	}
}

// netnsInUse reports whether a process is in the network namespace of
// inode ino.
func netnsInUse(ino uint64) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, p := range procs {
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil && st.Ino == ino {
			return true
		}
	}
	return false
}

// A daemon SIGKILLed while a kill's teardown cannot finish (a file in the
// sandbox's directory made immutable, so removing the directory fails and is
// retried): the kill already answered; the next start finishes the teardown
// and the sandbox never comes back.
func TestKillTeardownFinishedAfterDaemonSIGKILL(t *testing.T) {
	e := loadEnv(t)
	s := e.createV1(t, 300, nil)
	dir, unpin := pinTeardown(t, s.SandboxID)

	status, took := e.killTimed(t, s.SandboxID)
	if status != http.StatusNoContent {
		t.Fatalf("DELETE: %d, want 204", status)
	}
	t.Logf("kill answered in %v", took)
	e.requireGone(t, s.SandboxID)
	if left := notKilled(s.SandboxID); len(left) > 0 {
		t.Errorf("processes of the sandbox alive without SIGKILL after the kill: %v", left)
	}
	// The teardown is stuck on the pinned file: the directory stays.
	time.Sleep(time.Second)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("set-up: the sandbox dir went despite the pinned file: %v", err)
	}
	restartDaemon(t, e, unpin)
	e.requireGone(t, s.SandboxID)
	var what string
	if !waitFor(2*time.Minute, 250*time.Millisecond, func() (ok bool) { ok, what = teardownDone(t, s.SandboxID); return ok }) {
		t.Errorf("teardown not finished after the restart: %s left", what)
	}
}
