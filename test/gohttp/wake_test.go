//go:build e2e

package gohttp

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// fallbackLine is what the gVisor runtime logs for each agent wake-up
// (thaw after a restore, OOM guard) that went through `runsc kill` instead
// of the datagram to the agent's wake port (internal/runtime/gvisor/wake.go).
const fallbackLine = "waking the agent with runsc kill"

// daemonLogFrom returns the daemon log's lines written after offset.
func daemonLogFrom(t *testing.T, path string, offset int64) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("daemon log: %v", err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// TestWakeWithoutRunscKill: a create from a boot snapshot, a resume, a
// named snapshot's create, a fork (its child and its parent brought back)
// and an OOM guard kill all wake their agent with the datagram: the daemon
// logs no `runsc kill` fallback for any of these sandboxes, and each still
// runs commands.
func TestWakeWithoutRunscKill(t *testing.T) {
	e := loadEnv(t)
	logPath := os.Getenv("AIRLOCK_E2E_DAEMON_LOG")
	if logPath == "" {
		t.Fatal("AIRLOCK_E2E_DAEMON_LOG is not set (scripts/test.sh sets it)")
	}
	st, err := os.Stat(logPath)
	if err != nil {
		t.Fatalf("daemon log: %v", err)
	}
	offset := st.Size()
	before := scrapeMetrics(t, e)
	var ids []string
	check := func(s sandboxInfo, what string) {
		t.Helper()
		if r := e.run(t, s, "", "echo ok", time.Minute); r.exitCode != 0 || r.stdout != "ok\n" {
			t.Fatalf("%s: command after the wake-up: %+v", what, r)
		}
	}

	// create/restore (code-interpreter-v1 has a boot snapshot).
	ci := e.api(t, http.MethodPost, "/sandboxes", map[string]any{"templateID": "code-interpreter-v1", "timeout": 120})
	if ci.status != http.StatusCreated {
		t.Fatalf("create code-interpreter-v1: %d %s", ci.status, ci.body)
	}
	var restored sandboxInfo
	ci.json(t, &restored)
	t.Cleanup(func() { e.kill(restored.SandboxID) })
	ids = append(ids, restored.SandboxID)
	check(restored, "create from the boot snapshot")

	// pause and resume.
	src := e.createV1(t, 300, nil)
	ids = append(ids, src.SandboxID)
	if r := e.api(t, http.MethodPost, "/sandboxes/"+src.SandboxID+"/pause", nil); r.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	if r := e.api(t, http.MethodPost, "/sandboxes/"+src.SandboxID+"/resume", map[string]any{"timeout": 300}); r.status != http.StatusCreated {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	check(src, "resume")

	// A named snapshot (its parent is brought back) and a create from it.
	r := e.api(t, http.MethodPost, "/sandboxes/"+src.SandboxID+"/snapshots", map[string]any{"name": "wake-" + strings.ToLower(uniqueTag(t))})
	if r.status != http.StatusCreated {
		t.Fatalf("snapshot: %d %s", r.status, r.body)
	}
	snapID, _ := mustMap(t, r)["snapshotID"].(string)
	t.Cleanup(func() { e.api(t, http.MethodDelete, "/templates/"+snapID, nil) })
	cr := e.api(t, http.MethodPost, "/sandboxes", map[string]any{"templateID": snapID, "timeout": 120})
	if cr.status != http.StatusCreated {
		t.Fatalf("create from snapshot: %d %s", cr.status, cr.body)
	}
	var fromSnap sandboxInfo
	cr.json(t, &fromSnap)
	t.Cleanup(func() { e.kill(fromSnap.SandboxID) })
	ids = append(ids, fromSnap.SandboxID)
	check(fromSnap, "create from a named snapshot")

	// A fork: the child, and the parent brought back.
	fr := e.api(t, http.MethodPost, "/sandboxes/"+src.SandboxID+"/fork", map[string]any{"count": 1, "timeout": 120})
	if fr.status != http.StatusCreated {
		t.Fatalf("fork: %d %s", fr.status, fr.body)
	}
	var kids []struct {
		Sandbox *sandboxInfo `json:"sandbox"`
	}
	fr.json(t, &kids)
	if len(kids) != 1 || kids[0].Sandbox == nil {
		t.Fatalf("fork result: %s", fr.body)
	}
	kid := *kids[0].Sandbox
	t.Cleanup(func() { e.kill(kid.SandboxID) })
	ids = append(ids, kid.SandboxID)
	check(kid, "fork child")
	check(src, "fork parent")

	// The OOM guard: a memory bomb in a sandbox restored from the boot
	// snapshot (the host's memory watcher wakes the guard as it grows).
	oom := e.api(t, http.MethodPost, "/sandboxes", map[string]any{"templateID": "code-interpreter-v1", "timeout": 120, "memoryMB": 512})
	if oom.status != http.StatusCreated {
		t.Fatalf("create for the memory bomb: %d %s", oom.status, oom.body)
	}
	var bomb sandboxInfo
	oom.json(t, &bomb)
	t.Cleanup(func() { e.kill(bomb.SandboxID) })
	ids = append(ids, bomb.SandboxID)
	res, err := e.tryRun(t, bomb, "", "python3 -c 'b = []\nwhile True: b.append(bytearray(32 << 20))'", 2*time.Minute)
	if err != nil {
		t.Fatalf("memory bomb: %v", err)
	}
	if res.exitCode == 0 {
		t.Fatalf("memory bomb was not killed: %+v", res)
	}
	check(bomb, "after the memory bomb")

	after := scrapeMetrics(t, e)
	for _, k := range []string{stepKey("count", "create", "restore", "wake"), stepKey("count", "resume", "memory", "wake"),
		stepKey("count", "create", "snapshot", "wake"), stepKey("count", "create", "fork", "wake")} {
		if after[k]-before[k] < 1 {
			t.Errorf("%s went up by %v, want ≥ 1 (the wake step was not taken)", k, after[k]-before[k])
		}
	}
	// Every wake-up of this test went by datagram: at least one per
	// restore (the boot-snapshot create, the resume, the snapshot's parent
	// and child, the fork's parent and child) and none by runsc for them
	// (other tests' sandboxes may share the daemon: the log says whose).
	const dg = `airlock_agent_wakes_total{via="datagram"}`
	if n := after[dg] - before[dg]; n < 6 {
		t.Errorf("%s went up by %v, want ≥ 6", dg, n)
	}
	lines := daemonLogFrom(t, logPath, offset)
	seen := map[string]bool{}
	for _, l := range lines {
		for _, id := range ids {
			if !strings.Contains(l, id) {
				continue
			}
			seen[id] = true
			if strings.Contains(l, fallbackLine) {
				t.Errorf("sandbox %s was woken with runsc kill: %s", id, l)
			}
		}
	}
	// The log is the daemon's: it names the sandboxes (else the check
	// above proves nothing).
	if !seen[restored.SandboxID] && !seen[src.SandboxID] {
		t.Fatalf("the daemon log %s (%d new lines) names none of the sandboxes %v", logPath, len(lines), ids)
	}
}
