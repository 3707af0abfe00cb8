//go:build e2e

package gohttp

import (
	"strings"
	"testing"
	"time"
)

// Idle sandboxes cost (almost) nothing (issue 24). The agent's OOM guard
// used to look at memory every 20 ms, which kept gVisor's Sentry busy at
// ~7 % of a core per idle sandbox; now the host wakes it when the sandbox's
// memory grows. These tests run against the suite's gVisor daemon and check
// that a sleeping guard still stops a memory bomb; what an idle sandbox
// costs is measured by bench/density, not asserted here.
func TestIdleSandbox(t *testing.T) {
	e := loadEnv(t)

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
