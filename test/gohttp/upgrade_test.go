//go:build e2e

package gohttp

// An upgrade of the agent binary under paused and running sandboxes: the
// daemon restarts with another build of airlock-envd (as after installing a
// new release). Sandboxes saved with the old agent map its code from the host
// file, so their restores must get that exact binary back (internal/agentbin),
// while new sandboxes (and the template's boot snapshot) get the new one.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func sha256File(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// agentSum is the sha256 of the agent binary mounted in sandbox s.
func (e env) agentSum(t *testing.T, s sandboxInfo) string {
	t.Helper()
	r := e.run(t, s, "root", "sha256sum /usr/local/bin/airlock-envd", time.Minute)
	f := strings.Fields(r.stdout)
	if r.exitCode != 0 || len(f) == 0 {
		t.Fatalf("sha256sum of the agent in %s: %+v", s.SandboxID, r)
	}
	return f[0]
}

func TestAgentUpgradeKeepsSavedSandboxes(t *testing.T) {
	e := loadEnv(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	oldSum := sha256File(t, filepath.Join(root, "bin", "airlock-envd"))
	// Another build of the same code, compiled without optimisation: every
	// function sits at another address than in bin/airlock-envd.
	newAgent := filepath.Join(t.TempDir(), "airlock-envd")
	build := exec.Command("go", "build", "-gcflags=all=-N -l", "-o", newAgent, "./cmd/airlock-envd")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building another agent: %v\n%s", err, out)
	}
	newSum := sha256File(t, newAgent)
	if newSum == oldSum {
		t.Fatal("the second agent build is identical to the first")
	}

	paused := e.createV1(t, 600, nil)
	check := e.prepareCheckpointVictim(t, paused)
	running := e.createV1(t, 600, nil)
	if got := e.agentSum(t, paused); got != oldSum {
		t.Fatalf("a sandbox runs agent %s, want bin/airlock-envd's %s", got, oldSum)
	}
	if r := e.api(t, http.MethodPost, "/sandboxes/"+paused.SandboxID+"/pause", nil); r.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}

	restartDaemonArgs(t, e, nil, []string{"--envd-path", newAgent}, func() {})
	// Whatever happens next, the rest of the suite runs on the usual agent.
	defer restartDaemon(t, e, func() {})

	// The paused sandbox resumes with its memory, on the agent it started with.
	if found := e.settle(t, paused, check); found != "paused" {
		t.Fatalf("the paused sandbox was %s after the restart", found)
	}
	if got := e.agentSum(t, paused); got != oldSum {
		t.Fatalf("the resumed sandbox maps agent %s, want the one it was started with (%s)", got, oldSum)
	}
	// The re-attached running sandbox keeps working and forks: its child is
	// restored from the parent's memory, so it maps the parent's agent too.
	if r := e.run(t, running, "user", "echo still-here", time.Minute); r.stdout != "still-here\n" {
		t.Fatalf("the running sandbox after the restart: %+v", r)
	}
	r := e.api(t, http.MethodPost, "/sandboxes/"+paused.SandboxID+"/fork", map[string]any{"count": 1, "timeout": 120})
	if r.status != http.StatusCreated {
		t.Fatalf("fork of the old-agent sandbox: %d %s", r.status, r.body)
	}
	var kids []struct {
		Sandbox *sandboxInfo    `json:"sandbox"`
		Error   json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(r.body, &kids); err != nil || len(kids) != 1 || kids[0].Sandbox == nil {
		t.Fatalf("fork result: %s (%v)", r.body, err)
	}
	kid := *kids[0].Sandbox
	t.Cleanup(func() { e.kill(kid.SandboxID) })
	if rr, err := e.tryRun(t, kid, "root", check, time.Minute); err != nil || rr.stdout != "kept\nsame\n" {
		t.Fatalf("fork child of the old-agent sandbox lost state: %+v %v", rr, err)
	}
	if got := e.agentSum(t, kid); got != oldSum {
		t.Fatalf("the fork child maps agent %s, want its parent's (%s)", got, oldSum)
	}

	// New sandboxes, cold-booted or from the template's boot snapshot
	// (made again for the new agent), run the new build.
	fresh := e.createV1(t, 120, nil)
	if got := e.agentSum(t, fresh); got != newSum {
		t.Fatalf("a new sandbox runs agent %s, want the new build %s", got, newSum)
	}
	rc, ci := e.createFrom(t, "code-interpreter-v1")
	if rc.status != http.StatusCreated {
		t.Fatalf("create code-interpreter-v1: %d %s", rc.status, rc.body)
	}
	if got := e.agentSum(t, ci); got != newSum {
		t.Fatalf("a new code-interpreter sandbox runs agent %s, want the new build %s", got, newSum)
	}
}
