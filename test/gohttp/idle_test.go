//go:build e2e

package gohttp

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Idle sandboxes cost (almost) nothing (issue 24). The agent's OOM guard
// used to look at memory every 20 ms, which kept gVisor's Sentry busy at
// ~7 % of a core per idle sandbox; now the host wakes it when the sandbox's
// memory grows. These tests run against the suite's gVisor daemon.
func TestIdleSandbox(t *testing.T) {
	e := loadEnv(t)

	t.Run("idle/host-cpu", func(t *testing.T) {
		s := e.createV1(t, 300, nil)
		if r := e.run(t, s, "user", "true", 30*time.Second); r.exitCode != 0 {
			t.Fatalf("true: %+v", r)
		}
		time.Sleep(8 * time.Second) // past the guard's 5 s after the last request
		// The best of three 10 s windows: the host is shared, and another
		// process's load can only add to a window, never take from it.
		best := -1.0
		for i := 0; i < 3; i++ {
			pct := sandboxCPU(t, s.SandboxID, 10*time.Second)
			t.Logf("idle sandbox %s: %.2f %% of a core over 10 s", s.SandboxID, pct)
			if best < 0 || pct < best {
				best = pct
			}
			if best <= 1 {
				break
			}
		}
		// Before: 7–8 %. The goal is 0.2 %; 1 % leaves room for a loaded host.
		if best > 1 {
			t.Errorf("an idle sandbox costs %.2f %% of a core (want ≤ 1 %%)", best)
		}
	})

	t.Run("idle/memory-bomb-after-idle", func(t *testing.T) {
		// The guard sleeps while the sandbox idles; a bomb must still end by
		// SIGKILL with the sandbox, its files and other processes alive.
		s := e.createSmall(t)
		e.bombsKilled(t, s)
	})

	t.Run("idle/memory-bomb-after-daemon-restart", func(t *testing.T) {
		// A daemon that restarts watches the memory of the sandboxes it
		// finds running again, or their idle guards would never be woken.
		s := e.createSmall(t)
		restartDaemon(t, e, func() {})
		e.bombsKilled(t, s)
	})
}

// createSmall creates a base sandbox of 256 MiB holding a file.
func (e env) createSmall(t *testing.T) sandboxInfo {
	t.Helper()
	r := e.api(t, "POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 300, "secure": true, "memoryMB": 256})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var s sandboxInfo
	r.json(t, &s)
	t.Cleanup(func() { e.kill(s.SandboxID) })
	if res := e.run(t, s, "user", "echo kept > /home/user/keep.txt", 30*time.Second); res.exitCode != 0 {
		t.Fatalf("write: %+v", res)
	}
	return s
}

// bombsKilled runs memory bombs of large and small chunks in s, each
// started 12 s after the request that launched it returned (the guard
// checks closely while the agent serves requests and 5 s after; then only
// the host's wake-up can make it act in time): each must end by SIGKILL,
// and the sandbox and its file live on.
func (e env) bombsKilled(t *testing.T, s sandboxInfo) {
	t.Helper()
	for _, chunk := range []string{"100*2**20", "16*2**20"} {
		rc := "/home/user/bomb-rc-" + strings.ReplaceAll(chunk, "*", "")
		launch := `(sleep 12; python3 -c "b=[]
while True: b.append(bytearray(` + chunk + `))"; echo rc=$? > ` + rc + `) >/dev/null 2>&1 &`
		if res := e.run(t, s, "user", launch, 30*time.Second); res.exitCode != 0 {
			t.Fatalf("launching the bomb: %+v", res)
		}
		time.Sleep(25 * time.Second) // no request meanwhile
		if e.gone(t, s.SandboxID) {
			t.Fatalf("the sandbox stopped (%s chunks): the host's limit was hit before the guard acted", chunk)
		}
		res := e.run(t, s, "user", "cat "+rc+" /home/user/keep.txt", 30*time.Second)
		t.Logf("bomb of %s chunks: %+v", chunk, res)
		if !strings.Contains(res.stdout, "rc=137") || !strings.Contains(res.stdout, "kept") {
			t.Fatalf("the memory bomb (%s chunks) did not end by SIGKILL with the sandbox's file kept: %+v", chunk, res)
		}
	}
}

// sandboxCPU is the CPU the host processes of runsc sandbox id (the
// sandbox, its gofer and their children) use over window, in % of a core.
func sandboxCPU(t *testing.T, id string, window time.Duration) float64 {
	t.Helper()
	pids := runscTree(t, id)
	before := procTicks(pids)
	t0 := time.Now()
	time.Sleep(window)
	d := procTicks(pids) - before
	return float64(d) / 100 / time.Since(t0).Seconds() * 100
}

// runscTree lists the runsc processes naming id and their descendants.
func runscTree(t *testing.T, id string) []int {
	t.Helper()
	out, err := exec.Command("ps", "-e", "-o", "pid=,ppid=,args=").Output()
	if err != nil {
		t.Fatalf("ps: %v", err)
	}
	in := map[int]bool{}
	parent := map[int]int{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		pid, _ := strconv.Atoi(f[0])
		ppid, _ := strconv.Atoi(f[1])
		parent[pid] = ppid
		if strings.HasPrefix(f[2], "runsc") && strings.Contains(line, id) {
			in[pid] = true
		}
	}
	if len(in) == 0 {
		t.Fatalf("no runsc process of sandbox %s", id)
	}
	for changed := true; changed; {
		changed = false
		for pid, ppid := range parent {
			if !in[pid] && in[ppid] {
				in[pid], changed = true, true
			}
		}
	}
	var pids []int
	for pid := range in {
		pids = append(pids, pid)
	}
	return pids
}

// procTicks is utime+stime (all threads) of pids, in clock ticks.
func procTicks(pids []int) uint64 {
	var sum uint64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseUint(f[11], 10, 64)
		s, _ := strconv.ParseUint(f[12], 10, 64)
		sum += u + s
	}
	return sum
}
