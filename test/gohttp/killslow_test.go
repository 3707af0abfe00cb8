//go:build e2e

package gohttp

// A kill answers once SIGKILL has been sent to every process of the sandbox
// and its network is cut; the wait for the processes to exit runs in the
// background teardown (issue 24: under load that wait was most of a kill).

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sandboxPIDs lists the host processes of sandbox id (its Sentry, systrap
// stubs and gofer).
func sandboxPIDs(id, which string) []int {
	out, _ := exec.Command("pgrep", "-f", "^runsc-"+which+" .*"+id).Output()
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// sigkilled reports whether process pid is gone, exiting, or has SIGKILL
// pending: it never runs user code again.
func sigkilled(pid int) bool {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return true // gone
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return true
			}
		case "SigPnd", "ShdPnd":
			if mask, err := strconv.ParseUint(v, 16, 64); err == nil && mask&(1<<(9-1)) != 0 {
				return true
			}
		}
	}
	// Exiting: the SIGKILL was already taken and do_exit runs (PF_EXITING
	// in the flags, field 9 of stat).
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		if f := strings.Fields(s[i+1:]); len(f) > 6 {
			if flags, err := strconv.ParseUint(f[6], 10, 64); err == nil && flags&0x4 != 0 {
				return true
			}
		}
	}
	return false
}

// notKilled lists the processes of sandbox id that are alive and have no
// SIGKILL pending.
func notKilled(id string) []string {
	var out []string
	for _, which := range []string{"sandbox", "gofer"} {
		for _, pid := range sandboxPIDs(id, which) {
			if !sigkilled(pid) {
				cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				out = append(out, fmt.Sprintf("%d (%s)", pid, strings.ReplaceAll(string(cmd), "\x00", " ")))
			}
		}
	}
	return out
}

// holdExit freezes process pid in a cgroup v1 freezer cgroup of the test's
// own, so that a SIGKILL sent to it takes effect only when thaw is called
// (a frozen task dies when thawed): it stands for a process whose exit is
// slow (stuck in the kernel, or freeing gigabytes on a loaded host).
func holdExit(t *testing.T, name string, pid int) (thaw func()) {
	t.Helper()
	dir := filepath.Join("/sys/fs/cgroup/freezer", name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("set-up: creating a freezer cgroup (cgroup v1 freezer needed): %v", err)
	}
	write := func(file, v string) error { return os.WriteFile(filepath.Join(dir, file), []byte(v), 0o644) }
	thawed := false
	thaw = func() {
		if thawed {
			return
		}
		thawed = true
		if err := write("freezer.state", "THAWED"); err != nil {
			t.Errorf("thawing %s: %v", dir, err)
		}
	}
	t.Cleanup(func() {
		thaw()
		waitFor(30*time.Second, 100*time.Millisecond, func() bool { return os.Remove(dir) == nil })
	})
	if err := write("cgroup.procs", strconv.Itoa(pid)); err != nil {
		t.Fatalf("set-up: moving %d into %s: %v", pid, dir, err)
	}
	if err := write("freezer.state", "FROZEN"); err != nil {
		t.Fatalf("set-up: freezing %s: %v", dir, err)
	}
	if !waitFor(10*time.Second, 10*time.Millisecond, func() bool {
		st, _ := os.ReadFile(filepath.Join(dir, "freezer.state"))
		return strings.TrimSpace(string(st)) == "FROZEN"
	}) {
		t.Fatalf("set-up: %s not frozen after 10 s", dir)
	}
	return thaw
}

// The sandbox's gofer cannot exit for a while after SIGKILL (frozen). The
// kill still answers at once: its Sentry (everything the sandbox's code ran
// in) is SIGKILLed, nothing answers on its address, it is gone from the API.
// Its address is not handed out again while the gofer lives, and the
// teardown finishes once the gofer exits, here after the daemon was
// SIGKILLed in the meantime (the next start waits for the exit).
// Old main answered this kill only after its 10 s wait (then a runsc
// delete): the wait for the exit was part of the kill.
func TestKillAnswersBeforeSlowExit(t *testing.T) {
	e := loadEnv(t)
	s := e.createV1(t, 300, nil)
	if r := e.run(t, s, "", "nohup sleep 600 >/dev/null 2>&1 & echo started", time.Minute); r.stdout != "started\n" {
		t.Fatalf("starting a background process: %+v", r)
	}
	ip := guestAddr(t, s.SandboxID)
	gofers := sandboxPIDs(s.SandboxID, "gofer")
	if len(gofers) != 1 {
		t.Fatalf("set-up: %d gofer processes of the sandbox (%v), want 1", len(gofers), gofers)
	}
	thaw := holdExit(t, "airlock-e2e-hold-"+s.SandboxID, gofers[0])

	status, took := e.killTimed(t, s.SandboxID)
	if status != http.StatusNoContent {
		t.Fatalf("DELETE: %d, want 204", status)
	}
	t.Logf("kill answered in %v", took)
	if took > 5*time.Second {
		t.Errorf("the kill took %v while a process of the sandbox could not exit; want an answer once it is SIGKILLed", took)
	}
	if left := notKilled(s.SandboxID); len(left) > 0 {
		t.Errorf("processes of the sandbox alive without SIGKILL when the kill answered: %v", left)
	}
	if !sigkilled(gofers[0]) || len(sandboxPIDs(s.SandboxID, "gofer")) != 1 {
		t.Fatalf("set-up: the gofer is not held (still there: %v)", sandboxPIDs(s.SandboxID, "gofer"))
	}
	if answers(ip, envdPort) {
		t.Errorf("%s:%s still answers after the kill", ip, envdPort)
	}
	e.requireGone(t, s.SandboxID)
	// The Sentry, which ran the sandbox's processes, exits.
	if !waitFor(30*time.Second, 50*time.Millisecond, func() bool { return len(sandboxPIDs(s.SandboxID, "sandbox")) == 0 }) {
		t.Errorf("the sandbox's Sentry still alive 30 s after the kill")
	}

	// While the gofer lives, the killed sandbox's address is not reused and
	// its teardown does not finish.
	s2 := e.createV1(t, 300, nil)
	if ip2 := guestAddr(t, s2.SandboxID); ip2 == ip {
		t.Errorf("address %s handed out again while a process of the killed sandbox lives", ip)
	}
	if done, _ := teardownDone(t, s.SandboxID); done {
		t.Error("teardown finished while a process of the sandbox lives")
	}

	// The daemon dies before the exit; the next start waits for it.
	restartDaemon(t, e, func() {})
	e.requireGone(t, s.SandboxID)
	time.Sleep(time.Second)
	if done, _ := teardownDone(t, s.SandboxID); done {
		t.Error("teardown finished after the restart while a process of the sandbox lives")
	}
	thaw()
	if !waitFor(30*time.Second, 50*time.Millisecond, func() bool { return len(sandboxPIDs(s.SandboxID, "gofer")) == 0 }) {
		t.Errorf("the gofer still alive 30 s after it was thawed")
	}
	var what string
	if !waitFor(2*time.Minute, 250*time.Millisecond, func() (ok bool) { ok, what = teardownDone(t, s.SandboxID); return ok }) {
		t.Errorf("teardown not finished 2 min after the exit: %s left", what)
	}
	if st, _ := e.sandboxState(t, s2.SandboxID); st != http.StatusOK {
		t.Errorf("the other sandbox after the restart: GET %d, want 200", st)
	}
}
