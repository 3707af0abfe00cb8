//go:build e2e

package gohttp

// A sandbox whose agent dies (issue 7, scope 3): a command streaming through
// the proxy when the sandbox is stopped at its memory limit ends promptly
// with an error that says what happened, instead of hanging until the
// client's own deadline. Subtest names start with "fault/" for bench/report.
//
// A process over the sandbox's memory no longer stops the sandbox (the
// agent's OOM guard ends that process, limits.test.mjs); what still stops
// it is the host's memory cgroup, hit by memory the guard does not see in
// time. The test makes that happen: it lowers the sandbox's host cgroup
// limit to just above its current use, then allocates.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// squeezeHostMemory sets the host memory cgroup limit of sandbox id (the
// gVisor runtime's /airlock/<id>) to its current use plus headroom.
func squeezeHostMemory(t *testing.T, id string, headroom int64) {
	t.Helper()
	for _, c := range []struct{ dir, usage, limit string }{
		{"/sys/fs/cgroup/memory/airlock/" + id, "memory.usage_in_bytes", "memory.limit_in_bytes"},
		{"/sys/fs/cgroup/airlock/" + id, "memory.current", "memory.max"},
	} {
		b, err := os.ReadFile(filepath.Join(c.dir, c.usage))
		if err != nil {
			continue
		}
		used, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", c.usage, err)
		}
		if err := os.WriteFile(filepath.Join(c.dir, c.limit), []byte(fmt.Sprint(used+headroom)), 0o644); err != nil {
			t.Fatalf("lowering %s/%s: %v", c.dir, c.limit, err)
		}
		t.Logf("host memory limit of %s: %d MiB used, limit set to %d MiB", id, used>>20, (used+headroom)>>20)
		return
	}
	t.Fatalf("no host memory cgroup for sandbox %s (is the suite's daemon on gVisor?)", id)
}

func TestStreamWhenSandboxOOMStopped(t *testing.T) {
	e := loadEnv(t)
	t.Run("fault/oom-stop-ends-inflight-stream", func(t *testing.T) {
		r := e.api(t, "POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 300, "secure": true, "memoryMB": 256})
		if r.status != 201 {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		var s sandboxInfo
		r.json(t, &s)
		t.Cleanup(func() { e.kill(s.SandboxID) })

		const clientLimit = 150 * time.Second
		type result struct {
			r       cmdResult
			err     error
			elapsed time.Duration
		}
		done := make(chan result, 1)
		started := time.Now()
		go func() {
			r, err := e.tryRun(t, s, "user", "while true; do echo tick; sleep 1; done", clientLimit)
			done <- result{r, err, time.Since(started)}
		}()
		time.Sleep(2 * time.Second) // the stream is running
		squeezeHostMemory(t, s.SandboxID, 32<<20)
		bombAt := time.Now()
		_, _ = e.tryRun(t, s, "root", `python3 -c '
blocks = []
while True:
    blocks.append(bytearray(64 << 20))
'`, 90*time.Second)
		var res result
		select {
		case res = <-done:
		case <-time.After(clientLimit + 40*time.Second):
			t.Fatal("the in-flight stream never ended")
		}
		t.Logf("in-flight stream ended %v after the memory bomb started: err=%v errMsg=%q ticks=%d", time.Since(bombAt).Round(time.Millisecond), res.err, res.r.errMsg, strings.Count(res.r.stdout, "tick"))
		if res.elapsed >= clientLimit {
			t.Fatalf("the in-flight stream hung until the client's deadline (%v)", res.elapsed)
		}
		if res.err == nil && res.r.streamOK {
			t.Fatalf("the in-flight stream ended cleanly although its sandbox was stopped: %+v", res.r)
		}
		msg := res.r.errMsg
		if res.err != nil {
			msg = res.err.Error()
		}
		if !strings.Contains(msg, "memory limit") {
			t.Errorf("the stream's error does not say why the sandbox went away: %q", msg)
		}
		if !waitFor(30*time.Second, time.Second, func() bool { return e.gone(t, s.SandboxID) }) {
			t.Error("sandbox still listed after it was stopped at its memory limit")
		}
		// Counted as an unexpected stop for memory in the daemon's metrics.
		m := e.api(t, "GET", "/metrics", nil)
		if !regexp.MustCompile(`airlock_sandbox_unexpected_stops_total\{reason="memory"\} [1-9]`).Match(m.body) {
			t.Errorf("/metrics (%d) counts no unexpected stop for memory", m.status)
		}
	})
}
