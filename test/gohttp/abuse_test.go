//go:build e2e

package gohttp

// Resource abuse inside a sandbox (issue 7, scope 1): fork bomb, memory bomb,
// disk filler, many small files, CPU spinners, many sockets, huge stdout, a
// process ignoring SIGTERM, the agent killed from inside. Each subtest asserts
// the abuse was contained and that the daemon and a witness sandbox are
// unharmed. Bounds are sized for a 2-core CI machine.

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// dataDirFreeMiB is the free space of the daemon's data dir filesystem.
func dataDirFreeMiB(t *testing.T) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(os.Getenv("AIRLOCK_E2E_DATA_DIR"), &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize >> 20
}

// runscProcesses counts host processes whose command line mentions id.
func runscProcesses(id string) int {
	out, _ := exec.Command("pgrep", "-f", "runsc.*"+id).Output()
	return len(strings.Fields(string(out)))
}

// sandboxState returns the API status and state of a sandbox.
func (e env) sandboxState(t *testing.T, id string) (int, string) {
	t.Helper()
	r := e.api(t, http.MethodGet, "/sandboxes/"+id, nil)
	var m struct {
		State string `json:"state"`
	}
	_ = json.Unmarshal(r.body, &m)
	return r.status, m.State
}

// gone reports whether the API no longer lists the sandbox as running.
func (e env) gone(t *testing.T, id string) bool {
	st, state := e.sandboxState(t, id)
	return st == http.StatusNotFound || (st == http.StatusOK && state != "running")
}

// runSteady runs the positive-path commands of the abuse tests. (Streams
// cut before their end-stream envelope were the proxy's full-duplex bug,
// fixed; they are failures again, not retried.)
func (e env) runSteady(t *testing.T, s sandboxInfo, user, cmd string, timeout time.Duration) cmdResult {
	t.Helper()
	r, err := e.tryRun(t, s, user, cmd, timeout)
	if err != nil {
		t.Fatalf("running %q: %v", cmd, err)
	}
	return r
}

func TestResourceAbuse(t *testing.T) {
	e := loadEnv(t)
	witness := e.createV1(t, 900, nil)
	marker := "witness-" + uniqueTag(t) + "\n"
	if r := e.runSteady(t, witness, "", "echo "+strings.TrimSpace(marker)+" > ~/witness-marker && cat ~/witness-marker", time.Minute); r.stdout != marker {
		t.Fatalf("writing witness marker: %+v", r)
	}

	t.Run("attack/fork-bomb", func(t *testing.T) {
		s := e.createV1(t, 300, nil)
		start := time.Now()
		r, err := e.tryRun(t, s, "user", `timeout -s KILL 15 bash -c ':(){ :|:& };:' >/dev/null 2>&1; echo done`, 90*time.Second)
		t.Logf("fork bomb: %v, %+v, err %v", time.Since(start), r, err)
		e.unharmed(t, witness, marker)
		// The bomb's sandbox can still be killed cleanly.
		e.kill(s.SandboxID)
		if !waitFor(60*time.Second, time.Second, func() bool { return e.gone(t, s.SandboxID) && runscProcesses(s.SandboxID) == 0 }) {
			t.Fatalf("fork-bomb sandbox not gone after kill: runsc processes %d", runscProcesses(s.SandboxID))
		}
	})

	t.Run("attack/memory-bomb", func(t *testing.T) {
		s := e.createV1(t, 300, nil)
		start := time.Now()
		r, err := e.tryRun(t, s, "user", `python3 -c '
blocks = []
while True:
    blocks.append(bytearray(64 << 20))
' 2>&1 | tail -1; echo rc=${PIPESTATUS[0]}`, 90*time.Second)
		elapsed := time.Since(start)
		t.Logf("memory bomb: %+v err %v after %v", r, err, elapsed)
		// The command's stream ends (output or error), it does not hang
		// until the client's own deadline when the sandbox dies.
		if elapsed > 60*time.Second {
			t.Errorf("memory bomb command returned only after %v", elapsed)
		}
		// Either the allocation failed inside (MemoryError), the process was
		// killed by a signal inside the sandbox (the pinned runsc: SIGKILL
		// or SIGBUS when its memory cannot be backed, exit status > 128), or
		// the sandbox was stopped by its memory limit (runsc 20221219); it
		// never takes the host down.
		killed := false
		if i := strings.LastIndex(r.stdout, "rc="); i >= 0 {
			n, err := strconv.Atoi(strings.TrimSpace(r.stdout[i+len("rc="):]))
			killed = err == nil && n > 128
		}
		contained := strings.Contains(r.stdout, "MemoryError") || strings.Contains(r.stdout, "Killed") || killed ||
			waitFor(30*time.Second, time.Second, func() bool { return e.gone(t, s.SandboxID) })
		if !contained {
			t.Errorf("memory bomb: no MemoryError and the sandbox still runs: %+v", r)
		}
		e.unharmed(t, witness, marker)
	})

	t.Run("attack/disk-filler", func(t *testing.T) {
		s := e.createV1(t, 300, nil)
		freeBefore := dataDirFreeMiB(t)
		// fallocate reserves most of the writable layer without writing data
		// (bounded host I/O), then dd fills the rest until ENOSPC.
		r := e.runSteady(t, s, "user", `df -m ~ | tail -1; avail=$(df -m --output=avail ~ | tail -1); fallocate -l $(( (avail - 200) ))M ~/big 2>&1;
dd if=/dev/zero of=~/fill bs=1M 2>&1 | tail -4; echo dd-rc=${PIPESTATUS[0]}; df -m ~ | tail -1`, 5*time.Minute)
		t.Logf("disk filler: %s", r.stdout)
		if !strings.Contains(r.stdout, "No space left") {
			t.Errorf("disk filler did not hit ENOSPC: %+v", r)
		}
		if used := freeBefore - dataDirFreeMiB(t); used > 2048 {
			t.Errorf("disk filler consumed %d MiB of the host data dir", used)
		}
		// The sandbox recovers when space returns.
		if r := e.runSteady(t, s, "user", "rm -f ~/big ~/fill && echo ok > ~/after && cat ~/after", time.Minute); r.stdout != "ok\n" {
			t.Errorf("sandbox unusable after freeing space: %+v", r)
		}
		e.unharmed(t, witness, marker)
	})

	t.Run("attack/many-small-files", func(t *testing.T) {
		s := e.createV1(t, 300, nil)
		r := e.runSteady(t, s, "user", `mkdir -p ~/many && cd ~/many && python3 -c '
import os
n = 0
try:
    for i in range(20000):
        with open("f%d" % i, "w") as f: f.write("x")
        n += 1
except OSError as e:
    print("stopped", e)
print(n)
'; ls ~/many | wc -l`, 5*time.Minute)
		if r.exitCode != 0 {
			t.Errorf("many small files: %+v", r)
		}
		t.Logf("many small files: %s", strings.TrimSpace(r.stdout))
		e.unharmed(t, witness, marker)
	})

	t.Run("attack/cpu-spinner", func(t *testing.T) {
		s := e.createV1(t, 300, nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan cmdResult, 1)
		go func() {
			r, err := e.tryRun(t, s, "user", "for i in 1 2 3 4; do timeout 15 sh -c 'while :; do :; done' & done; wait; echo spun", 2*time.Minute)
			if err != nil {
				t.Errorf("cpu spinner command: %v", err)
			}
			done <- r
		}()
		time.Sleep(3 * time.Second)
		// While the spinners run, the witness still answers.
		var worst time.Duration
		for i := 0; i < 5 && ctx.Err() == nil; i++ {
			st := time.Now()
			e.unharmed(t, witness, marker)
			if d := time.Since(st); d > worst {
				worst = d
			}
		}
		t.Logf("witness command latency under 4 spinners: worst %v", worst)
		if r := <-done; r.stdout != "spun\n" {
			t.Errorf("spinner: %+v", r)
		}
	})

	t.Run("attack/many-sockets", func(t *testing.T) {
		s := e.createV1(t, 300, nil)
		r := e.runSteady(t, s, "user", `python3 -c '
import socket
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(4096)
socks = []
try:
    for i in range(1000):
        c = socket.create_connection(srv.getsockname()); a, _ = srv.accept(); socks += [c, a]
except OSError as e:
    print("stopped", e)
print(len(socks))
'`, 3*time.Minute)
		t.Logf("sockets: %s", strings.TrimSpace(r.stdout))
		if r.exitCode != 0 {
			t.Errorf("many sockets: %+v", r)
		}
		e.unharmed(t, witness, marker)
		if r := e.runSteady(t, s, "", "echo alive", time.Minute); r.stdout != "alive\n" {
			t.Errorf("agent after sockets: %+v", r)
		}
	})

	t.Run("attack/huge-stdout", func(t *testing.T) {
		s := e.createV1(t, 300, nil)
		pid := daemonPID(t)
		before, _ := rssKiB(pid)
		stop := sampleRSS(t, pid)
		const n = 64 << 20
		r := e.runSteady(t, s, "user", "head -c "+strconv.Itoa(n)+" /dev/zero | tr '\\0' a", 3*time.Minute)
		peak := stop()
		t.Logf("huge stdout: %d bytes streamed; daemon RSS %d KiB before, peak %d KiB", len(r.stdout), before, peak)
		if len(r.stdout) != n || r.exitCode != 0 {
			t.Errorf("huge stdout: got %d bytes, exit %d, want %d bytes", len(r.stdout), r.exitCode, n)
		}
		e.unharmed(t, witness, marker)
	})

	t.Run("attack/ignores-sigterm", func(t *testing.T) {
		s := e.createV1(t, 300, nil)
		type startRes struct {
			r   cmdResult
			err error
		}
		ch := make(chan startRes, 1)
		go func() {
			r, err := e.tryRun(t, s, "user", `trap "echo got-term" TERM; echo ready; while :; do sleep 0.2; done`, 2*time.Minute)
			ch <- startRes{r, err}
		}()
		var pid string
		if !waitFor(30*time.Second, 300*time.Millisecond, func() bool {
			r := e.runSteady(t, s, "root", "pgrep -u user -f 'trap .*got-term' | head -1", time.Minute)
			pid = strings.TrimSpace(r.stdout)
			return pid != ""
		}) {
			t.Fatal("the SIGTERM-ignoring process did not start")
		}
		sig := func(signal string) {
			st, body := e.connectUnary(t, s, "/process.Process/SendSignal", "", map[string]any{
				"process": map[string]any{"pid": mustAtoi(pid)}, "signal": signal})
			if st != http.StatusOK {
				t.Fatalf("SendSignal %s: %d %s", signal, st, body)
			}
		}
		sig("SIGNAL_SIGTERM")
		time.Sleep(2 * time.Second)
		if r := e.runSteady(t, s, "root", "kill -0 "+pid+" && echo alive", time.Minute); r.stdout != "alive\n" {
			t.Fatalf("process did not survive SIGTERM (positive control): %+v", r)
		}
		sig("SIGNAL_SIGKILL")
		select {
		case res := <-ch:
			if !res.r.endSeen && res.err == nil && res.r.streamOK {
				t.Errorf("stream ended without an end event after SIGKILL: %+v", res.r)
			}
			if !strings.Contains(res.r.stdout, "got-term") {
				t.Errorf("trap output missing: %+v", res.r)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("process stream still open 30 s after SIGKILL")
		}
	})

	t.Run("attack/agent-killed-from-inside", func(t *testing.T) {
		s := e.createV1(t, 300, nil)
		_, _ = e.tryRun(t, s, "root", "kill -9 1", 30*time.Second)
		start := time.Now()
		if !waitFor(60*time.Second, 500*time.Millisecond, func() bool { return e.gone(t, s.SandboxID) }) {
			st, state := e.sandboxState(t, s.SandboxID)
			t.Fatalf("sandbox whose agent died is still reported: status %d state %q after 60 s", st, state)
		}
		t.Logf("agent death reported after %v", time.Since(start))
		// Requests to it fail fast instead of hanging.
		st := time.Now()
		if _, err := e.tryRun(t, s, "", "echo hi", 20*time.Second); err == nil {
			t.Errorf("command in a dead sandbox succeeded")
		}
		if d := time.Since(st); d > 15*time.Second {
			t.Errorf("request to a dead sandbox took %v", d)
		}
		if !waitFor(30*time.Second, time.Second, func() bool { return runscProcesses(s.SandboxID) == 0 }) {
			t.Errorf("%d runsc processes left for the dead sandbox", runscProcesses(s.SandboxID))
		}
		e.unharmed(t, witness, marker)
	})
}
