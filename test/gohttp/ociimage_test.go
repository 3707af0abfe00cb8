//go:build e2e

package gohttp

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// tarLayer packs entries (name → content; a "->target" content makes a
// symlink, a trailing "/" a directory) into an image layer.
func tarLayer(t *testing.T, entries [][2]string) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e[0], Mode: 0o755, ModTime: time.Unix(1600000000, 0)}
		switch {
		case strings.HasSuffix(e[0], "/"):
			h.Typeflag = tar.TypeDir
		case strings.HasPrefix(e[1], "->"):
			h.Typeflag, h.Linkname = tar.TypeSymlink, strings.TrimPrefix(e[1], "->")
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e[1]))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.WriteString(tw, e[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// busyboxImage builds a two-layer image from the host's static busybox:
// layer 1 has busybox, applet links (no sync: builds flush through the
// agent) and a file that layer 2 whites out.
func busyboxImage(t *testing.T, token string) v1.Image {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("needs the host's busybox-static at /bin/busybox: %v", err)
	}
	files := [][2]string{
		{"bin/", ""}, {"bin/busybox", string(bb)}, {"etc/", ""},
		{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"}, {"etc/group", "root:x:0:\n"},
		{"root/", ""}, {"removed-later", "gone"},
	}
	for _, a := range []string{"sh", "ls", "cat", "echo", "id", "rm", "mkdir", "env", "test", "sleep", "true"} {
		files = append(files, [2]string{"bin/" + a, "->/bin/busybox"})
	}
	img, err := mutate.AppendLayers(empty.Image, tarLayer(t, files), tarLayer(t, [][2]string{{".wh.removed-later", ""}}))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = []string{"PATH=/bin", "IMAGE_TOKEN=" + token}
	cf.Config.WorkingDir = "/root"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// buildTemplate posts a context (Dockerfile + files) to the build endpoint
// and returns the NDJSON lines and the final error ("" on success).
func (e env) buildTemplate(t *testing.T, tplName string, files map[string]string) ([]map[string]any, string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for n, c := range files {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(c)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.apiURL+"/airlock/v1/templates/"+tplName+"/build?memoryMB=512", &buf)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-tar")
	req.Header.Set("X-API-KEY", e.apiKey)
	res, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return nil, string(b)
	}
	var lines []map[string]any
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("build log line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
		if msg, ok := m["error"].(string); ok {
			return lines, msg
		}
	}
	if len(lines) == 0 || lines[len(lines)-1]["done"] != true {
		t.Fatalf("build log ended without done: %v", lines)
	}
	return lines, ""
}

// lastInfo is the build's summary line (layer, cached steps, duration).
func lastInfo(lines []map[string]any) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if lines[i]["phase"] == "info" {
			m, _ := lines[i]["message"].(string)
			return m
		}
	}
	return ""
}

func logText(lines []map[string]any) string {
	var b strings.Builder
	for _, l := range lines {
		if m, ok := l["message"].(string); ok {
			b.WriteString(m + "\n")
		}
	}
	return b.String()
}

// TestTemplateFromOCIImage: FROM an image in a registry (go-containerregistry's
// in-process registry on loopback), RUN + COPY on top, a sandbox from it runs
// /bin/sh through the agent, and a rebuild reuses the unpacked image.
func TestTemplateFromOCIImage(t *testing.T) {
	e := loadEnv(t)
	token := uniqueTag(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	ref := u.Host + "/test/busy:1"
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, busyboxImage(t, token)); err != nil {
		t.Fatalf("pushing the test image: %v", err)
	}
	tpl := "oci-busy-" + token
	t.Cleanup(func() { e.api(t, http.MethodDelete, "/airlock/v1/templates/"+tpl, nil) })
	files := map[string]string{
		"Dockerfile": "FROM " + ref + "\nRUN echo hi > /x && id -u > /run-uid\nCOPY hello.txt /hello.txt\n",
		"hello.txt":  "hello " + token + "\n",
	}
	lines, errMsg := e.buildTemplate(t, tpl, files)
	if errMsg != "" {
		t.Fatalf("build failed: %s\n%s", errMsg, logText(lines))
	}

	t.Logf("cold build: %s", lastInfo(lines))
	body := map[string]any{"templateID": tpl, "timeout": 120, "metadata": map[string]string{}, "envVars": map[string]string{}, "secure": true}
	cr := e.api(t, http.MethodPost, "/sandboxes", body)
	if cr.status != http.StatusCreated {
		t.Fatalf("POST /sandboxes from %s: %d %s", tpl, cr.status, cr.body)
	}
	var s sandboxInfo
	cr.json(t, &s)
	t.Cleanup(func() { e.kill(s.SandboxID) })

	script := `cat /x /hello.txt /run-uid; echo "env=$IMAGE_TOKEN pwd=$(pwd) uid=$(id -u)"; ` +
		`test -e /removed-later && echo whiteout-ignored; test -e /etc/ld.so.preload && echo preload-in-static-image; ` +
		`test -d /usr/local/bin && echo has-local-bin`
	res, err := e.tryRunArgv(t, s, "root", []string{"/bin/sh", "-c", script}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := "hi\nhello " + token + "\n0\nenv=" + token + " pwd=/root uid=0\nhas-local-bin\n"
	if res.exitCode != 0 || res.stdout != want {
		t.Fatalf("in the sandbox: exit %d stdout %q stderr %q; want stdout %q", res.exitCode, res.stdout, res.stderr, want)
	}
	// The default sandbox user exists (added to the image's /etc/passwd).
	res, err = e.tryRunArgv(t, s, "user", []string{"/bin/sh", "-c", "id -u; echo $HOME"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if res.exitCode != 0 || res.stdout != "1000\n/home/user\n" {
		t.Fatalf("as user: exit %d stdout %q stderr %q", res.exitCode, res.stdout, res.stderr)
	}

	// Rebuild: the unpacked image and every step come from the cache.
	lines, errMsg = e.buildTemplate(t, tpl, files)
	if errMsg != "" {
		t.Fatalf("rebuild failed: %s", errMsg)
	}
	t.Logf("cached rebuild: %s", lastInfo(lines))
	log := logText(lines)
	if !strings.Contains(log, ": cached") || strings.Count(log, "CACHED") != 2 {
		t.Fatalf("rebuild did not reuse the image and the steps:\n%s", log)
	}
}

// TestTemplateFromMissingImage: an image that the registry does not have
// fails the build with the FROM line and a clear message.
func TestTemplateFromMissingImage(t *testing.T) {
	e := loadEnv(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	tpl := "oci-missing-" + uniqueTag(t)
	_, errMsg := e.buildTemplate(t, tpl, map[string]string{"Dockerfile": "FROM " + u.Host + "/test/nothing:1\nRUN true\n"})
	if !strings.Contains(errMsg, "Dockerfile line 1") || !strings.Contains(errMsg, "pulling image") {
		t.Fatalf("want a FROM error naming the line and the pull, got %q", errMsg)
	}
	if r := e.api(t, http.MethodGet, "/airlock/v1/templates/"+tpl, nil); r.status != http.StatusNotFound {
		t.Fatalf("failed build left a template: %d %s", r.status, r.body)
	}
}

// TestTemplateFromOCILayoutGlibc: FROM an OCI layout directory written by
// the test holding a glibc image (the host's bash and its libraries); the
// SDK's `/bin/bash -l -c` works in a sandbox from it, with no preload.
func TestTemplateFromOCILayoutGlibc(t *testing.T) {
	e := loadEnv(t)
	token := uniqueTag(t)
	files := [][2]string{{"bin/", ""}, {"lib/", ""}, {"lib/x86_64-linux-gnu/", ""}, {"lib64/", ""}, {"etc/", ""}, {"tmp/", ""}}
	for _, p := range []string{"/bin/bash", "/lib/x86_64-linux-gnu/libtinfo.so.6", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("needs the host's %s: %v", p, err)
		}
		files = append(files, [2]string{strings.TrimPrefix(p, "/"), string(b)})
	}
	img, err := mutate.AppendLayers(empty.Image, tarLayer(t, files))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = []string{"PATH=/bin"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	// Local images must be inside the daemon's --image-dir.
	images := os.Getenv("AIRLOCK_E2E_IMAGE_DIR")
	if images == "" {
		t.Fatal("AIRLOCK_E2E_IMAGE_DIR must be set (run scripts/test.sh)")
	}
	dir, err := os.MkdirTemp(images, "glibc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "glibc"})); err != nil {
		t.Fatal(err)
	}
	tpl := "oci-glibc-" + token
	t.Cleanup(func() { e.api(t, http.MethodDelete, "/airlock/v1/templates/"+tpl, nil) })
	lines, errMsg := e.buildTemplate(t, tpl, map[string]string{
		"Dockerfile": "FROM oci-layout://" + dir + ":glibc\nSHELL [\"/bin/bash\", \"-c\"]\nRUN echo \"built-" + token + "\" > /built\n",
	})
	if errMsg != "" {
		t.Fatalf("build failed: %s\n%s", errMsg, logText(lines))
	}
	cr := e.api(t, http.MethodPost, "/sandboxes", map[string]any{"templateID": tpl, "timeout": 120, "secure": true})
	if cr.status != http.StatusCreated {
		t.Fatalf("POST /sandboxes from %s: %d %s", tpl, cr.status, cr.body)
	}
	var s sandboxInfo
	cr.json(t, &s)
	t.Cleanup(func() { e.kill(s.SandboxID) })
	// No preload any more: the statx shim for gVisor 20221219 is gone.
	res := e.run(t, s, "user", `read -r b < /built; p=none; test -e /etc/ld.so.preload && p=preload; echo "$b $p"`, time.Minute)
	want := "built-" + token + " none\n"
	if res.exitCode != 0 || res.stdout != want {
		t.Fatalf("exit %d stdout %q stderr %q; want %q", res.exitCode, res.stdout, res.stderr, want)
	}
}
