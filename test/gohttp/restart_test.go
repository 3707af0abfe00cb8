//go:build e2e

package gohttp

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// restartDaemon SIGKILLs the running daemon, waits for it to disappear, runs
// between() while it is down, then starts it again with AIRLOCK_E2E_SERVE_CMD
// in its own session (so it outlives this test binary) and waits for /health.
// The new pid is written to AIRLOCK_E2E_PID_FILE for scripts/test.sh.
func restartDaemon(t *testing.T, e env, between func()) {
	t.Helper()
	restartDaemonWhen(t, e, nil, between)
}

// restartDaemonWhen is restartDaemon that first polls trigger (when not nil)
// every 20 ms, for up to a minute, and SIGKILLs the daemon as soon as it
// returns true (to kill it in the middle of an operation).
func restartDaemonWhen(t *testing.T, e env, trigger func() bool, between func()) {
	t.Helper()
	restartDaemonArgs(t, e, trigger, nil, between)
}

// restartDaemonArgs is restartDaemonWhen that appends extra to the serve
// command line of the new daemon (the next restart drops them again).
func restartDaemonArgs(t *testing.T, e env, trigger func() bool, extra []string, between func()) {
	t.Helper()
	if trigger != nil && !waitFor(time.Minute, 20*time.Millisecond, trigger) {
		t.Fatal("kill trigger never fired")
	}
	cmdline := append(strings.Fields(os.Getenv("AIRLOCK_E2E_SERVE_CMD")), extra...)
	pidFile := os.Getenv("AIRLOCK_E2E_PID_FILE")
	if len(cmdline) == 0 || pidFile == "" {
		t.Fatal("AIRLOCK_E2E_SERVE_CMD and AIRLOCK_E2E_PID_FILE must be set to test restarts")
	}
	pid := daemonPID(t)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL daemon %d: %v", pid, err)
	}
	if !waitFor(30*time.Second, 100*time.Millisecond, func() bool {
		return syscall.Kill(pid, 0) != nil || isZombie(pid)
	}) {
		t.Fatalf("daemon %d still alive 30 s after SIGKILL", pid)
	}
	// A killed multi-threaded process reads as a zombie while some of its
	// threads are still exiting (seen: one in uninterruptible sleep during a
	// fork's layer copy); its files, the data-dir lock included, close only
	// when the last one is gone, and a daemon started before that refuses to
	// run. Wait for the lock to be free.
	if dataDir := os.Getenv("AIRLOCK_E2E_DATA_DIR"); dataDir != "" {
		if !waitFor(30*time.Second, 100*time.Millisecond, func() bool { return lockFree(filepath.Join(dataDir, "daemon.lock")) }) {
			t.Fatalf("daemon %d killed, but its data-dir lock is still held 30 s later (threads: %s)", pid, threadStates(pid))
		}
	}
	between()

	logPath := os.Getenv("AIRLOCK_E2E_DAEMON_LOG")
	if logPath == "" {
		logPath = os.DevNull
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	cmd := exec.Command(cmdline[0], cmdline[1:]...)
	// The stand-in credentials scripts/test.sh starts the daemon with.
	cmd.Env = append(os.Environ(), strings.Fields(os.Getenv("AIRLOCK_E2E_CANARY_ENV"))...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("restarting daemon: %v", err)
	}
	newPID := cmd.Process.Pid
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(newPID)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Release()

	if !waitFor(3*time.Minute, 250*time.Millisecond, func() bool { return healthy(e.apiURL) }) {
		t.Fatalf("daemon (pid %d) not healthy 3 min after restart; see %s", newPID, logPath)
	}
}

// lockFree reports whether nobody holds the flock at path.
func lockFree(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return true
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return true
}

// threadStates lists the state letter of every thread left of pid.
func threadStates(pid int) string {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/stat")
	var out []string
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 && len(s) > i+2 {
			out = append(out, filepath.Base(filepath.Dir(p))+":"+s[i+2:i+3])
		}
	}
	return strings.Join(out, " ")
}

func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}

func healthy(apiURL string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, apiURL+"/health", nil)
	if err != nil {
		return false
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// mountsUnder lists mount points below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

func TestDaemonRestart(t *testing.T) {
	e := loadEnv(t)
	dataDir := os.Getenv("AIRLOCK_E2E_DATA_DIR")
	if dataDir == "" {
		t.Fatal("AIRLOCK_E2E_DATA_DIR must be set")
	}
	tag := uniqueTag(t)
	survivor := e.createV1(t, 600, map[string]string{"e2e-restart": tag})
	shortLived := e.createV1(t, 8, map[string]string{"e2e-restart": tag})

	// State the survivor keeps across the restart.
	if r := e.run(t, survivor, "", "echo kept > ~/marker", time.Minute); r.exitCode != 0 {
		t.Fatalf("writing marker: %+v", r)
	}
	if _, err := os.Stat("/var/run/netns/" + netnsPrefix() + shortLived.SandboxID); err != nil {
		t.Fatalf("positive control: netns of %s not found before the restart (is AIRLOCK_E2E_NETNS_PREFIX right?): %v", shortLived.SandboxID, err)
	}

	restartDaemon(t, e, func() {
		// The short-lived sandbox's 8 s timeout passes while the daemon is down.
		time.Sleep(12 * time.Second)
	})

	// The survivor is listed, reachable and kept its files.
	r := e.api(t, http.MethodGet, "/sandboxes/"+survivor.SandboxID, nil)
	if r.status != http.StatusOK {
		t.Fatalf("survivor after restart: GET status %d %s", r.status, r.body)
	}
	res := e.run(t, survivor, "", "cat ~/marker", time.Minute)
	if res.exitCode != 0 || res.stdout != "kept\n" {
		t.Fatalf("survivor after restart: %+v", res)
	}
	r = e.api(t, http.MethodGet, "/v2/sandboxes?metadata="+pythonMetadataQuery(map[string]string{"e2e-restart": tag}), nil)
	var listed []map[string]any
	r.json(t, &listed)
	ids := map[any]bool{}
	for _, it := range listed {
		ids[it["sandboxID"]] = true
	}
	if !ids[survivor.SandboxID] {
		t.Errorf("survivor %s not listed after restart: %s", survivor.SandboxID, r.body)
	}
	if ids[shortLived.SandboxID] {
		t.Errorf("expired sandbox %s still listed after restart", shortLived.SandboxID)
	}

	// The expired one is gone everywhere, host resources included.
	id := shortLived.SandboxID
	netnsPath := "/var/run/netns/" + netnsPrefix() + id
	sbDir := filepath.Join(dataDir, "sandboxes", id)
	var leftovers []string
	ok := waitFor(30*time.Second, 500*time.Millisecond, func() bool {
		leftovers = nil
		if _, err := os.Stat(netnsPath); err == nil {
			leftovers = append(leftovers, netnsPath)
		}
		leftovers = append(leftovers, mountsUnder(t, sbDir)...)
		if st := e.api(t, http.MethodGet, "/sandboxes/"+id, nil).status; st != http.StatusNotFound {
			leftovers = append(leftovers, "API status "+strconv.Itoa(st))
		}
		return len(leftovers) == 0
	})
	if !ok {
		t.Errorf("expired sandbox %s not cleaned up after restart: %v", id, leftovers)
	}
	if _, err := os.Stat(sbDir); err == nil {
		t.Errorf("sandbox dir %s still exists", sbDir)
	}
}

// netnsPrefix is the daemon's network namespace name prefix (its --net-prefix
// plus "-"), from AIRLOCK_E2E_NETNS_PREFIX.
func netnsPrefix() string {
	if p := os.Getenv("AIRLOCK_E2E_NETNS_PREFIX"); p != "" {
		return p
	}
	return "airlock-"
}
