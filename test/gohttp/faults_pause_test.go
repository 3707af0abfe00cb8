//go:build e2e

package gohttp

// Faults during pause and fork (issue 7, scope 3): the daemon SIGKILLed while
// a sandbox is being checkpointed. After the restart every sandbox involved
// is running and reachable (with its files and memory), paused with an image
// that resumes, or reported gone, and nothing is leaked. Subtest names start
// with "fault/" for bench/report.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// post sends a control-plane POST in the background and ignores the result
// (the daemon is killed under it).
func (e env) postAsync(path string, body any) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		raw, _ := json.Marshal(body)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.apiURL+path, bytes.NewReader(raw))
		req.Header.Set("X-API-Key", e.apiKey)
		req.Header.Set("Content-Type", "application/json")
		if res, err := httpClient.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	return done
}

// prepareCheckpointVictim gives s a file and 32 MiB of memory (so that its
// checkpoint takes a while) and returns the command that checks both.
func (e env) prepareCheckpointVictim(t *testing.T, s sandboxInfo) string {
	t.Helper()
	cmd := "head -c 32M /dev/urandom > /dev/shm/blob && md5sum < /dev/shm/blob > /root/blob.md5 && echo kept > /root/marker && echo ok"
	if r := e.runSteady(t, s, "root", cmd, time.Minute); r.stdout != "ok\n" {
		t.Fatalf("preparing %s: %+v", s.SandboxID, r)
	}
	return "cat /root/marker; md5sum < /dev/shm/blob | cmp - /root/blob.md5 && echo same"
}

// settle brings a sandbox found after a restart to a checkable state:
// running (asserting its file and memory survived), paused (resumed, then
// the same), or gone. It returns what it found.
func (e env) settle(t *testing.T, s sandboxInfo, check string) string {
	t.Helper()
	st, state := e.sandboxState(t, s.SandboxID)
	found := state
	switch {
	case st == http.StatusNotFound:
		return "gone"
	case st == http.StatusOK && state == "paused":
		r := e.api(t, http.MethodPost, "/sandboxes/"+s.SandboxID+"/resume", map[string]any{"timeout": 300})
		if r.status != http.StatusCreated {
			t.Fatalf("sandbox %s paused after the restart but its image does not resume: %d %s", s.SandboxID, r.status, r.body)
		}
	case st == http.StatusOK && state == "running":
	default:
		t.Fatalf("sandbox %s after the restart: %d %q", s.SandboxID, st, state)
	}
	if r, err := e.tryRun(t, s, "root", check, time.Minute); err != nil || r.stdout != "kept\nsame\n" {
		t.Fatalf("sandbox %s (%s after the restart) lost state: %+v %v", s.SandboxID, found, r, err)
	}
	// Its disk takes writes (a layer left frozen by a kill during a layer
	// copy would block this one).
	if r, err := e.tryRun(t, s, "root", "echo after > /root/after-restart && sync && cat /root/after-restart", 30*time.Second); err != nil || r.stdout != "after\n" {
		t.Fatalf("sandbox %s (%s after the restart) cannot write to its disk: %+v %v", s.SandboxID, found, r, err)
	}
	return found
}

func TestDaemonKilledMidCheckpoint(t *testing.T) {
	e := loadEnv(t)
	dataDir := os.Getenv("AIRLOCK_E2E_DATA_DIR")
	if dataDir == "" {
		t.Fatal("AIRLOCK_E2E_DATA_DIR must be set")
	}

	t.Run("fault/kill-9-during-pause", func(t *testing.T) {
		s := e.createV1(t, 600, nil)
		check := e.prepareCheckpointVictim(t, s)
		img := filepath.Join(dataDir, "sandboxes", s.SandboxID, "checkpoint")
		done := e.postAsync("/sandboxes/"+s.SandboxID+"/pause", nil)
		restartDaemonWhen(t, e, func() bool { _, err := os.Stat(img); return err == nil }, func() {})
		<-done
		found := e.settle(t, s, check)
		t.Logf("sandbox paused when the daemon died: %s after the restart", found)
		e.checkNoLeaks(t, map[string]sandboxInfo{s.SandboxID: s})
	})

	t.Run("fault/kill-9-during-fork", func(t *testing.T) {
		before := readHostState(t)
		s := e.createV1(t, 600, nil)
		check := e.prepareCheckpointVictim(t, s)
		done := e.postAsync("/sandboxes/"+s.SandboxID+"/fork", map[string]any{"count": 3, "timeout": 120})
		children := map[string]bool{}
		// Cheap trigger (one ReadDir): the kill lands while the children
		// are being prepared or restored, with the parent checkpointed.
		restartDaemonWhen(t, e, func() bool {
			ents, _ := os.ReadDir(filepath.Join(dataDir, "sandboxes"))
			for _, en := range ents {
				if id := en.Name(); !before.dirs[id] && id != s.SandboxID {
					children[id] = true
				}
			}
			return len(children) > 0
		}, func() {})
		<-done
		found := e.settle(t, s, check)
		seen := map[string]sandboxInfo{s.SandboxID: s}
		for id := range children {
			seen[id] = sandboxInfo{} // no token: checked for leaks, listed or gone
			t.Cleanup(func() { e.kill(id) })
		}
		t.Logf("fork parent: %s after the restart; %d child dir(s) existed at the kill", found, len(children))
		e.checkNoLeaks(t, seen)
		// The daemon forks again after the restart.
		r := e.api(t, http.MethodPost, "/sandboxes/"+s.SandboxID+"/fork", map[string]any{"count": 1, "timeout": 60})
		if found != "gone" && r.status != http.StatusCreated {
			t.Fatalf("fork after the restart: %d %s", r.status, r.body)
		}
		var res []struct {
			Sandbox *struct {
				SandboxID string `json:"sandboxID"`
			} `json:"sandbox"`
		}
		_ = json.Unmarshal(r.body, &res)
		for _, c := range res {
			if c.Sandbox != nil {
				e.kill(c.Sandbox.SandboxID)
			}
		}
	})
}
