//go:build e2e

package gohttp

// Half-written templates (issue 7, scope 3): the daemon SIGKILLed in the
// middle of a Dockerfile template build. After the restart the template is
// not listed, a create from it fails clearly, the build's scratch directories
// and its RUN sandbox are gone, and template directories no template or
// sandbox refers to (old builds) are collected at start while the ones in use
// stay. Subtest names start with "fault/" for bench/report.

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// templateDirs lists templates/ entries: hash directories and scratch ones.
func templateDirs(t *testing.T, dataDir string) (hashes, scratch []string) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dataDir, "templates"))
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range ents {
		if strings.HasPrefix(en.Name(), ".") {
			scratch = append(scratch, en.Name())
		} else {
			hashes = append(hashes, en.Name())
		}
	}
	return hashes, scratch
}

func TestDaemonKilledMidTemplateBuild(t *testing.T) {
	e := loadEnv(t)
	dataDir := os.Getenv("AIRLOCK_E2E_DATA_DIR")
	if dataDir == "" {
		t.Fatal("AIRLOCK_E2E_DATA_DIR must be set")
	}

	t.Run("fault/kill-9-during-template-build", func(t *testing.T) {
		name := "e2e-halfbuilt-" + uniqueTag(t)
		// An old build nobody refers to: collected at the next start.
		orphan := strings.Repeat("0", 63) + "f"
		orphanDir := filepath.Join(dataDir, "templates", orphan)
		if err := os.MkdirAll(filepath.Join(orphanDir, "rootfs", "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		meta := `{"name":"layer","hash":"` + orphan + `","sizeBytes":0,"createdAt":"2026-01-01T00:00:00Z","spec":"{\"kind\":\"layer\",\"parent\":\"scratch\"}"}`
		if err := os.WriteFile(filepath.Join(orphanDir, "meta.json"), []byte(meta), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(orphanDir) })
		// A sandbox running on base keeps base's directory in use.
		s := e.createV1(t, 600, nil)
		before := readHostState(t)

		var tarBuf bytes.Buffer
		writeTar(t, &tarBuf, map[string]string{"Dockerfile": "FROM base\nRUN echo step1 > /step1\nRUN sleep 120\n"})
		buildDone := make(chan struct{})
		go func() {
			defer close(buildDone)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.apiURL+"/airlock/v1/templates/"+name+"/build", &tarBuf)
			req.Header.Set("Content-Type", "application/x-tar")
			req.Header.Set("X-API-KEY", e.apiKey)
			if res, err := httpClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, res.Body) // the build runs while we read
				res.Body.Close()
			}
		}()
		// Kill once the `RUN sleep` step's sandbox runs (step 1 published,
		// the build's scratch dirs exist).
		runSandboxes := map[string]bool{}
		restartDaemonWhen(t, e, func() bool {
			_, scratch := templateDirs(t, dataDir)
			for id := range readHostState(t).runsc {
				if !before.runsc[id] {
					runSandboxes[id] = true
				}
			}
			return len(scratch) > 0 && len(runSandboxes) >= 2
		}, func() {})
		<-buildDone

		// Not listed, and a create from it is a clear 404.
		r := e.api(t, http.MethodGet, "/templates", nil)
		if r.status != http.StatusOK || strings.Contains(string(r.body), name) {
			t.Fatalf("templates after the restart: %d, lists the half-built %s: %s", r.status, name, r.body)
		}
		r = e.api(t, http.MethodPost, "/sandboxes", map[string]any{"templateID": name, "timeout": 60})
		var eb struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if r.status != http.StatusNotFound || json.Unmarshal(r.body, &eb) != nil || !strings.Contains(eb.Message, name) {
			t.Fatalf("create from the half-built template: %d %s, want 404 naming it", r.status, r.body)
		}
		// No scratch directory, the orphan collected, base kept. The
		// daemon serves as soon as its templates exist and collects once
		// they are all ready, so this may trail /health by a moment.
		hashes, scratch := templateDirs(t, dataDir)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if len(scratch) == 0 && !slices.Contains(hashes, orphan) {
				break
			}
			hashes, scratch = templateDirs(t, dataDir)
		}
		if len(scratch) > 0 {
			t.Errorf("scratch directories left after the restart: %v", scratch)
		}
		for _, h := range hashes {
			if h == orphan {
				t.Errorf("unreferenced template directory %s not collected at start", orphan)
			}
		}
		t.Logf("%d template directories after the restart", len(hashes))
		// The build's RUN sandboxes are gone, nothing leaked, the running
		// sandbox is intact.
		seen := map[string]sandboxInfo{s.SandboxID: s}
		for id := range runSandboxes {
			seen[id] = sandboxInfo{}
		}
		e.checkNoLeaks(t, seen)
		for id := range runSandboxes {
			if st, _ := e.sandboxState(t, id); st != http.StatusNotFound {
				t.Errorf("build sandbox %s still known after the restart: %d", id, st)
			}
		}
		// The same build now completes, and a sandbox runs on it.
		lines, errMsg := e.buildTemplate(t, name, map[string]string{"Dockerfile": "FROM base\nRUN echo step1 > /step1\n"})
		if errMsg != "" {
			t.Fatalf("rebuild after the restart: %s", errMsg)
		}
		_ = lines
		r = e.api(t, http.MethodPost, "/sandboxes", map[string]any{"templateID": name, "timeout": 60, "secure": true})
		if r.status != http.StatusCreated {
			t.Fatalf("create from the rebuilt template: %d %s", r.status, r.body)
		}
		var sb sandboxInfo
		r.json(t, &sb)
		t.Cleanup(func() { e.kill(sb.SandboxID) })
		if res := e.runSteady(t, sb, "", "cat /step1", time.Minute); res.stdout != "step1\n" {
			t.Fatalf("sandbox on the rebuilt template: %+v", res)
		}
		e.kill(sb.SandboxID)
		_ = e.api(t, http.MethodDelete, "/airlock/v1/templates/"+name, nil)
	})
}

// writeTar writes files into w as a tar archive.
func writeTar(t *testing.T, w *bytes.Buffer, files map[string]string) {
	t.Helper()
	tw := tar.NewWriter(w)
	for n, c := range files {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(c)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}
