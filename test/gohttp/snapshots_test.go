//go:build e2e

package gohttp

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPauseResumeRawHTTP drives pause/resume with the bodies the Python SDK
// sends: 204 then 409 on pause, state "paused" in info and list, 409 on
// resume of a running sandbox, 201 on connect/resume of a paused one, and
// the writable layer and a background process survive.
func TestPauseResumeRawHTTP(t *testing.T) {
	e := loadEnv(t)
	tag := uniqueTag(t)
	s := e.createV1(t, 300, map[string]string{"e2e-pause": tag})
	if r := e.run(t, s, "", "echo kept > ~/marker; setsid sleep 1000 >/dev/null 2>&1 </dev/null & sleep 0.5; pgrep -c -x sleep", time.Minute); r.exitCode != 0 {
		t.Fatalf("setup: %+v", r)
	}
	errorBody(t, e.api(t, http.MethodPost, "/sandboxes/"+s.SandboxID+"/resume", map[string]any{"timeout": 60}), http.StatusConflict)

	if r := e.api(t, http.MethodPost, "/sandboxes/"+s.SandboxID+"/pause", nil); r.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	errorBody(t, e.api(t, http.MethodPost, "/sandboxes/"+s.SandboxID+"/pause", map[string]any{}), http.StatusConflict)
	errorBody(t, e.api(t, http.MethodPost, "/sandboxes/inotthere0000000000000/pause", nil), http.StatusNotFound)

	var info map[string]any
	e.api(t, http.MethodGet, "/sandboxes/"+s.SandboxID, nil).json(t, &info)
	if info["state"] != "paused" {
		t.Fatalf("state after pause = %v", info["state"])
	}
	var listed []map[string]any
	e.api(t, http.MethodGet, "/v2/sandboxes?state=paused&metadata="+pythonMetadataQuery(map[string]string{"e2e-pause": tag}), nil).json(t, &listed)
	if len(listed) != 1 || listed[0]["sandboxID"] != s.SandboxID {
		t.Fatalf("paused list = %v", listed)
	}
	// The proxy does not reach a paused sandbox created without autoResume.
	if _, err := e.tryRun(t, s, "", "true", 10*time.Second); err == nil {
		t.Fatal("command ran in a paused sandbox")
	}

	r := e.api(t, http.MethodPost, "/sandboxes/"+s.SandboxID+"/connect", map[string]any{"timeout": 120})
	if r.status != http.StatusCreated {
		t.Fatalf("connect on paused: %d %s, want 201", r.status, r.body)
	}
	requireKeys(t, "connect", mustMap(t, r), "sandboxID", "templateID", "clientID", "envdVersion", "envdAccessToken")
	res := e.run(t, s, "", "cat ~/marker; pgrep -c -x sleep", time.Minute)
	if res.exitCode != 0 || res.stdout != "kept\n1\n" {
		t.Fatalf("after resume: %+v", res)
	}
	if r := e.api(t, http.MethodPost, "/sandboxes/"+s.SandboxID+"/connect", map[string]any{"timeout": 120}); r.status != http.StatusOK {
		t.Fatalf("connect on running: %d, want 200", r.status)
	}
}

// TestPausedSurvivesRestart pauses a sandbox, restarts the daemon and
// resumes it: the paused state, the image and the disk are kept.
func TestPausedSurvivesRestart(t *testing.T) {
	e := loadEnv(t)
	dataDir := os.Getenv("AIRLOCK_E2E_DATA_DIR")
	if dataDir == "" {
		t.Fatal("AIRLOCK_E2E_DATA_DIR must be set")
	}
	s := e.createV1(t, 300, nil)
	if r := e.run(t, s, "", "echo across-restart > ~/marker", time.Minute); r.exitCode != 0 {
		t.Fatalf("setup: %+v", r)
	}
	if r := e.api(t, http.MethodPost, "/sandboxes/"+s.SandboxID+"/pause", nil); r.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	restartDaemon(t, e, func() {})
	var info map[string]any
	r := e.api(t, http.MethodGet, "/sandboxes/"+s.SandboxID, nil)
	if r.status != http.StatusOK {
		t.Fatalf("paused sandbox after restart: %d %s", r.status, r.body)
	}
	r.json(t, &info)
	if info["state"] != "paused" {
		t.Fatalf("state after restart = %v", info["state"])
	}
	if _, err := os.Stat(filepath.Join(dataDir, "sandboxes", s.SandboxID, "disk.img")); err != nil {
		t.Fatalf("writable layer gone after restart: %v", err)
	}
	r = e.api(t, http.MethodPost, "/sandboxes/"+s.SandboxID+"/resume", map[string]any{"timeout": 60})
	if r.status != http.StatusCreated {
		t.Fatalf("resume after restart: %d %s", r.status, r.body)
	}
	res := e.run(t, s, "", "cat ~/marker", time.Minute)
	if res.exitCode != 0 || strings.TrimSpace(res.stdout) != "across-restart" {
		t.Fatalf("after resume: %+v", res)
	}
	// Kill removes everything, including the sandbox dir.
	e.kill(s.SandboxID)
	if !waitFor(30*time.Second, 200*time.Millisecond, func() bool {
		_, err := os.Stat(filepath.Join(dataDir, "sandboxes", s.SandboxID))
		return os.IsNotExist(err)
	}) {
		t.Fatal("sandbox dir left after kill")
	}
}

func mustMap(t *testing.T, r apiResp) map[string]any {
	t.Helper()
	var m map[string]any
	r.json(t, &m)
	return m
}
