//go:build e2e

package gohttp

// A sandbox whose agent dies (issue 7, scope 3): a command streaming through
// the proxy when the sandbox is stopped at its memory limit ends promptly
// with an error that says what happened, instead of hanging until the
// client's own deadline. Subtest names start with "fault/" for bench/report.

import (
	"strings"
	"testing"
	"time"
)

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
	})
}
