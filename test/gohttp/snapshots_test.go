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

// createFrom creates a sandbox (v1, Python SDK body) from a template or
// snapshot reference and registers its cleanup; it returns the response.
func (e env) createFrom(t *testing.T, ref string) (apiResp, sandboxInfo) {
	t.Helper()
	r := e.api(t, http.MethodPost, "/sandboxes", map[string]any{
		"templateID": ref, "timeout": 120, "metadata": map[string]string{}, "envVars": map[string]string{},
		"secure": true, "allow_internet_access": true,
	})
	var s sandboxInfo
	if r.status == http.StatusCreated {
		r.json(t, &s)
		t.Cleanup(func() { e.kill(s.SandboxID) })
	}
	return r, s
}

// TestNamedSnapshotRawHTTP covers the snapshot endpoints' bad input with raw
// HTTP, then that snapshots survive a daemon restart: the manifest is
// verified at start (a tampered snapshot is listed with its problem and
// refused), stray files are collected, and a good one still starts
// sandboxes.
func TestNamedSnapshotRawHTTP(t *testing.T) {
	e := loadEnv(t)
	dataDir := os.Getenv("AIRLOCK_E2E_DATA_DIR")
	if dataDir == "" {
		t.Fatal("AIRLOCK_E2E_DATA_DIR must be set")
	}
	s := e.createV1(t, 300, nil)
	if r := e.run(t, s, "", "echo from-snapshot > ~/marker", time.Minute); r.exitCode != 0 {
		t.Fatalf("setup: %+v", r)
	}
	path := "/sandboxes/" + s.SandboxID + "/snapshots"
	errorBody(t, e.api(t, http.MethodPost, "/sandboxes/inotthere0000000000000/snapshots", map[string]any{}), http.StatusNotFound)
	errorBody(t, e.api(t, http.MethodPost, path, map[string]any{"name": "Not/Valid"}), http.StatusBadRequest)
	errorBody(t, e.api(t, http.MethodPost, path, map[string]any{"name": 7}), http.StatusBadRequest)
	errorBody(t, e.api(t, http.MethodPost, path, map[string]any{"name": "base"}), http.StatusConflict)
	errorBody(t, e.api(t, http.MethodGet, "/snapshots?limit=1000", nil), http.StatusBadRequest)
	errorBody(t, e.api(t, http.MethodGet, "/snapshots?nextToken=!!", nil), http.StatusBadRequest)
	errorBody(t, e.api(t, http.MethodDelete, "/templates/snotthere000000000000", nil), http.StatusNotFound)

	name := "raw-" + strings.ToLower(uniqueTag(t))
	var good, bad map[string]any
	r := e.api(t, http.MethodPost, path, map[string]any{"name": name})
	if r.status != http.StatusCreated {
		t.Fatalf("snapshot: %d %s", r.status, r.body)
	}
	r.json(t, &good)
	requireKeys(t, "snapshot", good, "snapshotID", "names")
	r = e.api(t, http.MethodPost, path, nil) // no body: unnamed
	if r.status != http.StatusCreated {
		t.Fatalf("unnamed snapshot: %d %s", r.status, r.body)
	}
	r.json(t, &bad)
	goodID, badID := good["snapshotID"].(string), bad["snapshotID"].(string)
	t.Cleanup(func() {
		e.api(t, http.MethodDelete, "/templates/"+goodID, nil)
		e.api(t, http.MethodDelete, "/templates/"+badID, nil)
	})
	// The source keeps running.
	if res := e.run(t, s, "", "cat ~/marker", time.Minute); strings.TrimSpace(res.stdout) != "from-snapshot" {
		t.Fatalf("source after snapshot: %+v", res)
	}

	snaps := filepath.Join(dataDir, "snapshots")
	restartDaemon(t, e, func() {
		// Tamper with one snapshot's memory image; leave a half-written dir.
		f, err := os.OpenFile(filepath.Join(snaps, badID, "checkpoint", "checkpoint.img"), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("tampered"), 100); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := os.MkdirAll(filepath.Join(snaps, ".tmp-sleftover"), 0o700); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := os.Stat(filepath.Join(snaps, ".tmp-sleftover")); !os.IsNotExist(err) {
		t.Fatalf("half-written snapshot dir not collected at start: %v", err)
	}
	var listed []map[string]any
	e.api(t, http.MethodGet, "/snapshots?sandboxID="+s.SandboxID, nil).json(t, &listed)
	if len(listed) != 2 {
		t.Fatalf("snapshots after restart = %v", listed)
	}
	for _, l := range listed {
		if l["snapshotID"] == badID && l["problem"] == nil {
			t.Fatalf("tampered snapshot listed without a problem: %v", l)
		}
		if l["snapshotID"] == goodID && l["problem"] != nil {
			t.Fatalf("good snapshot has a problem: %v", l)
		}
	}
	r, _ = e.createFrom(t, badID)
	errorBody(t, r, http.StatusConflict)
	r, child := e.createFrom(t, name)
	if r.status != http.StatusCreated {
		t.Fatalf("create from snapshot after restart: %d %s", r.status, r.body)
	}
	if child.TemplateID != goodID || child.EnvdAccessToken == "" || child.EnvdAccessToken == s.EnvdAccessToken {
		t.Fatalf("sandbox from snapshot = %+v", child)
	}
	if res := e.run(t, child, "", "cat ~/marker; echo $E2B_SANDBOX_ID", time.Minute); res.stdout != "from-snapshot\n"+child.SandboxID+"\n" {
		t.Fatalf("sandbox from snapshot: %+v", res)
	}
	// Listed as a template; deleting it (204) removes the files; then 404.
	var tpls []map[string]any
	e.api(t, http.MethodGet, "/templates", nil).json(t, &tpls)
	found := false
	for _, tp := range tpls {
		found = found || (tp["templateID"] == goodID && tp["snapshot"] == true)
	}
	if !found {
		t.Fatalf("snapshot %s not in GET /templates", goodID)
	}
	for _, id := range []string{goodID, badID} {
		if r := e.api(t, http.MethodDelete, "/templates/"+id, nil); r.status != http.StatusNoContent {
			t.Fatalf("delete %s: %d %s", id, r.status, r.body)
		}
		errorBody(t, e.api(t, http.MethodDelete, "/templates/"+id, nil), http.StatusNotFound)
		if _, err := os.Stat(filepath.Join(snaps, id)); !os.IsNotExist(err) {
			t.Fatalf("snapshot files of %s after delete: %v", id, err)
		}
	}
	// The sandbox made from it lives on.
	if res := e.run(t, child, "", "cat ~/marker", time.Minute); strings.TrimSpace(res.stdout) != "from-snapshot" {
		t.Fatalf("sandbox from a deleted snapshot: %+v", res)
	}
}
