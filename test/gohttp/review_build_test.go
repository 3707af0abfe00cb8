//go:build e2e

package gohttp

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Security review (issue 23), template builds: H1 (build-context symlinks
// reading host files), L3 (template-file uploads: gzip bombs), M7 (FROM
// fetching from the node's host network, echoing bodies, reading local
// paths).

// ctxEntry is one build context entry: a regular file, or a symlink when
// link is set.
type ctxEntry struct{ name, content, link string }

func contextTar(t *testing.T, entries []ctxEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(e.content))}
		if e.link != "" {
			h = &tar.Header{Name: e.name, Mode: 0o777, Typeflag: tar.TypeSymlink, Linkname: e.link}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.link == "" {
			if _, err := io.WriteString(tw, e.content); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// buildResultLine is the final line of a Dockerfile build's NDJSON stream.
type buildResultLine struct {
	log   string
	err   string
	code  int // the status of a refused build (the stream itself is a 200)
	httpS int // the HTTP status when the request itself was refused
}

// postBuild posts a build context tar to the Dockerfile build endpoint.
func (e env) postBuild(t *testing.T, tpl string, ctxTar []byte) buildResultLine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.apiURL+"/airlock/v1/templates/"+tpl+"/build?memoryMB=512", bytes.NewReader(ctxTar))
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
	out := buildResultLine{httpS: res.StatusCode}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		out.err = string(b)
		return out
	}
	var logb strings.Builder
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("build log line %q: %v", sc.Text(), err)
		}
		if msg, ok := m["message"].(string); ok {
			logb.WriteString(msg + "\n")
		}
		if msg, ok := m["error"].(string); ok {
			out.err = msg
			if c, ok := m["code"].(float64); ok {
				out.code = int(c)
			}
		}
	}
	out.log = logb.String()
	return out
}

// dirNames lists the entries of dir (none when it does not exist).
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// hostUnchanged records the daemon's template layers and uploaded file
// sets; the returned check fails the test if any was added (a layer, a
// file set, a leftover temp dir; the template GC's .trash-* dirs aside: it
// may run in the background), or if the template tpl exists.
func (e env) hostUnchanged(t *testing.T, tpl string) func() {
	t.Helper()
	data := os.Getenv("AIRLOCK_E2E_DATA_DIR")
	if data == "" {
		t.Fatal("AIRLOCK_E2E_DATA_DIR must be set (run scripts/test.sh)")
	}
	dirs := []string{filepath.Join(data, "templates"), filepath.Join(data, "template-files")}
	before := map[string][]string{}
	for _, d := range dirs {
		before[d] = dirNames(t, d)
	}
	return func() {
		t.Helper()
		for _, d := range dirs {
			for _, n := range dirNames(t, d) {
				if !slices.Contains(before[d], n) && !strings.HasPrefix(n, ".trash-") {
					t.Errorf("%s gained %s", d, n)
				}
			}
		}
		if tpl != "" {
			if r := e.api(t, http.MethodGet, "/airlock/v1/templates/"+tpl, nil); r.status != http.StatusNotFound {
				t.Errorf("the refused build left template %s: %d %s", tpl, r.status, r.body)
			}
		}
	}
}

// wantRefused checks a build was refused as the user's fault (4xx), with a
// message containing every one of want, and not carrying leak.
func wantRefused(t *testing.T, r buildResultLine, leak string, want ...string) {
	t.Helper()
	if r.err == "" {
		t.Fatalf("the build succeeded; want it refused\n%s", r.log)
	}
	code := r.code
	if r.httpS != http.StatusOK {
		code = r.httpS
	}
	if code < 400 || code > 499 {
		t.Errorf("refused with status %d (%q); want a 4xx", code, r.err)
	}
	for _, w := range want {
		if !strings.Contains(r.err, w) {
			t.Errorf("error %q does not say %q", r.err, w)
		}
	}
	if leak != "" && (strings.Contains(r.err, leak) || strings.Contains(r.log, leak)) {
		t.Errorf("the build output carries %q:\nerror %s\nlog %s", leak, r.err, r.log)
	}
}

func TestReviewBuild(t *testing.T) {
	e := loadEnv(t)
	hostname, _ := os.ReadFile("/etc/hostname")
	hostnameText := strings.TrimSpace(string(hostname))

	// H1: a symlink in the build context must not let COPY/ADD read the
	// node's files. Each case is a real Dockerfile build over the API.
	h1 := []struct {
		name    string
		entries []ctxEntry
		want    []string
	}{
		{"H1-copy-symlink-to-etc", []ctxEntry{{name: "Dockerfile", content: "FROM base\nCOPY d/hostname /x\n"}, {name: "d", link: "/etc"}},
			[]string{"d/hostname", "outside the build context"}},
		{"H1-copy-symlink-to-proc-self", []ctxEntry{{name: "Dockerfile", content: "FROM base\nCOPY d/environ /x\n"}, {name: "d", link: "/proc/self"}},
			[]string{"d/environ", "outside the build context"}},
		{"H1-copy-glob-through-symlink", []ctxEntry{{name: "Dockerfile", content: "FROM base\nCOPY d/host* /x/\n"}, {name: "d", link: "/etc"}},
			[]string{"d/host*", "outside the build context"}},
		{"H1-copy-dotdot-chain", []ctxEntry{{name: "Dockerfile", content: "FROM base\nCOPY l1/hostname /x\n"},
			{name: "sub/keep", content: "k"}, {name: "l1", link: "sub/l2"}, {name: "sub/l2", link: "../sub/l3"}, {name: "sub/l3", link: "../../../../../../etc"}},
			[]string{"l1/hostname", "outside the build context"}},
		{"H1-copy-dotdot-direct", []ctxEntry{{name: "Dockerfile", content: "FROM base\nCOPY sub/up/etc/hostname /x\n"},
			{name: "sub/keep", content: "k"}, {name: "sub/up", link: strings.Repeat("../", 16)}},
			[]string{"sub/up/etc/hostname", "outside the build context"}},
		{"H1-add-symlink-to-etc", []ctxEntry{{name: "Dockerfile", content: "FROM base\nADD d/hostname /x\n"}, {name: "d", link: "/etc"}},
			[]string{"d/hostname", "outside the build context"}},
		{"H1-dockerignore-symlink-out", []ctxEntry{{name: "Dockerfile", content: "FROM base\nCOPY f /f\n"}, {name: "f", content: "f"}, {name: ".dockerignore", link: "/etc/hostname"}},
			[]string{".dockerignore", "outside the build context"}},
	}
	for _, c := range h1 {
		t.Run("attack/"+c.name, func(t *testing.T) {
			tpl := "review-build-" + uniqueTag(t)
			check := e.hostUnchanged(t, tpl)
			r := e.postBuild(t, tpl, contextTar(t, c.entries))
			wantRefused(t, r, hostnameText, c.want...)
			check()
		})
	}

	// The same semantics allow what stays inside the context: a link is
	// followed, and a link met while copying a directory is kept as a link
	// (whatever its target: copying a link reads nothing).
	t.Run("positive/H1-in-context-links-followed", func(t *testing.T) {
		token := uniqueTag(t)
		tpl := "review-build-ok-" + token
		t.Cleanup(func() { e.api(t, http.MethodDelete, "/airlock/v1/templates/"+tpl, nil) })
		r := e.postBuild(t, tpl, contextTar(t, []ctxEntry{
			{name: "Dockerfile", content: "FROM base\nCOPY d/f.txt /f.txt\nCOPY app /app\nCOPY up/sub/f.txt /g.txt\n"},
			{name: "sub/f.txt", content: "in-context " + token + "\n"}, {name: "d", link: "sub"}, {name: "up", link: "sub/.."},
			{name: "app/a.txt", content: "a\n"}, {name: "app/abs", link: "/etc/hostname"}, {name: "app/rel", link: "a.txt"},
		}))
		if r.err != "" {
			t.Fatalf("build failed: %s (%d)\n%s", r.err, r.code, r.log)
		}
		cr := e.api(t, http.MethodPost, "/sandboxes", map[string]any{"templateID": tpl, "timeout": 120, "secure": true})
		if cr.status != http.StatusCreated {
			t.Fatalf("POST /sandboxes from %s: %d %s", tpl, cr.status, cr.body)
		}
		var s sandboxInfo
		cr.json(t, &s)
		t.Cleanup(func() { e.kill(s.SandboxID) })
		res := e.run(t, s, "root", "cat /f.txt /g.txt /app/rel; readlink /app/abs; test -L /app/rel && echo rel-is-link", time.Minute)
		want := "in-context " + token + "\nin-context " + token + "\na\n/etc/hostname\nrel-is-link\n"
		if res.exitCode != 0 || res.stdout != want {
			t.Fatalf("in the sandbox: exit %d stdout %q stderr %q; want %q", res.exitCode, res.stdout, res.stderr, want)
		}
	})

	// H1 through the SDK path: a copy() file set whose tar carries a link
	// out of the set. The official SDK resolves the source path on the
	// client (its glob follows d/ locally), so the upload it would send for
	// copy("d/hostname") with d -> /etc on the *server* is crafted here
	// through the raw v3 endpoints.
	t.Run("attack/H1-sdk-copy-symlink-out-of-set", func(t *testing.T) {
		tpl := "review-sdk-" + uniqueTag(t)
		hash := e.uploadTarGz(t, tpl, []ctxEntry{{name: "d", link: "/etc"}, {name: "keep.txt", content: tpl}})
		check := e.hostUnchanged(t, tpl)
		b := e.requestV3(t, tpl, nil)
		spec := map[string]any{"fromTemplate": "base", "steps": []map[string]any{
			{"type": "COPY", "args": []string{"d/hostname", "/x"}, "filesHash": hash},
			{"type": "RUN", "args": []string{"cat /x", "root"}},
		}}
		if r := e.api(t, http.MethodPost, "/v2/templates/"+tpl+"/builds/"+b.BuildID, spec); r.status != http.StatusAccepted {
			t.Fatalf("start: %d %s", r.status, r.body)
		}
		bi, logs := e.waitBuild(t, b)
		if bi.Status != "error" || bi.Reason == nil {
			t.Fatalf("the build through a link out of the file set ended %s; want an error\n%s", bi.Status, logs)
		}
		if !strings.Contains(bi.Reason.Message, "d/hostname") || !strings.Contains(bi.Reason.Message, "outside the build context") {
			t.Errorf("reason %q does not name the path and the refusal", bi.Reason.Message)
		}
		if strings.Contains(logs, hostnameText) {
			t.Errorf("the build log carries the host's hostname:\n%s", logs)
		}
		check()
	})

	// L3: a gzip bomb (3 GiB of zeros in a few MiB) is refused with a 413
	// and nothing is stored.
	t.Run("attack/L3-gzip-bomb-upload", func(t *testing.T) {
		tpl := "review-bomb-" + uniqueTag(t)
		bomb := gzipBomb(t, tpl, 3<<30)
		sum := sha256.Sum256(bomb)
		hash := hex.EncodeToString(sum[:])
		check := e.hostUnchanged(t, "")
		link := e.uploadLink(t, tpl, hash)
		res, err := httpClient.Do(mustRequest(t, http.MethodPut, link, bomb))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "decompress") {
			t.Fatalf("gzip bomb (%d bytes compressed): %d %s; want 413 saying it decompresses to too much", len(bomb), res.StatusCode, body)
		}
		r := e.api(t, http.MethodGet, "/templates/"+tpl+"/files/"+hash, nil)
		if !strings.Contains(string(r.body), `"present":false`) {
			t.Errorf("the refused upload is present: %s", r.body)
		}
		check()
	})

	// L3: the content under a files hash cannot be swapped by a second PUT
	// with a still valid upload URL (the hash itself cannot be recomputed
	// from the upload: see DECISIONS).
	t.Run("attack/L3-stored-file-set-not-replaced", func(t *testing.T) {
		tpl := "review-swap-" + uniqueTag(t)
		orig := contextTar(t, []ctxEntry{{name: "app/a.txt", content: "original " + tpl}})
		sum := sha256.Sum256(orig)
		hash := hex.EncodeToString(sum[:])
		link := e.uploadLink(t, tpl, hash)
		for i, body := range [][]byte{orig, contextTar(t, []ctxEntry{{name: "app/a.txt", content: "swapped " + tpl}})} {
			res, err := httpClient.Do(mustRequest(t, http.MethodPut, link, body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("PUT %d: %d %s", i+1, res.StatusCode, b)
			}
		}
		stored, err := os.ReadFile(filepath.Join(os.Getenv("AIRLOCK_E2E_DATA_DIR"), "template-files", hash+".tar"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(stored, []byte("original "+tpl)) || bytes.Contains(stored, []byte("swapped")) {
			t.Errorf("the stored file set was replaced by the second upload")
		}
	})

	// M7: FROM must not reach the node's loopback (or any denied address)
	// unless the operator allowlisted it, and must never echo a body.
	secret := "internal-service-secret-" + uniqueTag(t)
	var hits atomic.Int64
	internal := func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, secret)
	}
	t.Run("attack/M7-from-loopback-not-allowlisted", func(t *testing.T) {
		// [::1]: loopback, not in the test daemon's --registry-allow
		// (127.0.0.1 only). go-containerregistry speaks plain HTTP to it.
		srv := serveOn(t, "[::1]:0", http.HandlerFunc(internal))
		tpl := "review-ssrf-" + uniqueTag(t)
		check := e.hostUnchanged(t, tpl)
		before := hits.Load()
		r := e.postBuild(t, tpl, contextTar(t, []ctxEntry{{name: "Dockerfile", content: "FROM " + srv + "/some/image:1\nRUN true\n"}}))
		wantRefused(t, r, secret, "Dockerfile line 1", "refusing to connect", "--registry-allow")
		if hits.Load() != before {
			t.Errorf("the loopback service was reached %d times", hits.Load()-before)
		}
		check()
	})
	t.Run("attack/M7-token-realm-to-denied-address", func(t *testing.T) {
		deniedURL := "http://" + serveOn(t, "[::1]:0", http.HandlerFunc(internal))
		// An allowlisted registry (127.0.0.1) whose token realm names the
		// denied service.
		reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm=%q,service="x"`, deniedURL+"/token"))
			w.WriteHeader(http.StatusUnauthorized)
		}))
		defer reg.Close()
		u, _ := url.Parse(reg.URL)
		tpl := "review-realm-" + uniqueTag(t)
		check := e.hostUnchanged(t, tpl)
		before := hits.Load()
		r := e.postBuild(t, tpl, contextTar(t, []ctxEntry{{name: "Dockerfile", content: "FROM " + u.Host + "/some/image:1\nRUN true\n"}}))
		// go-containerregistry v0.22.1 itself refuses a realm that is a
		// literal private address; the dialer also covers realms that are
		// names (this host has no name for ::1 to test that here).
		wantRefused(t, r, secret, "Dockerfile line 1")
		if hits.Load() != before {
			t.Errorf("the denied token realm was fetched %d times", hits.Load()-before)
		}
		check()
	})
	t.Run("attack/M7-registry-redirect-to-denied-address", func(t *testing.T) {
		deniedURL := "http://" + serveOn(t, "[::1]:0", http.HandlerFunc(internal))
		reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, deniedURL+r.URL.Path, http.StatusTemporaryRedirect)
		}))
		defer reg.Close()
		u, _ := url.Parse(reg.URL)
		tpl := "review-redirect-" + uniqueTag(t)
		check := e.hostUnchanged(t, tpl)
		before := hits.Load()
		r := e.postBuild(t, tpl, contextTar(t, []ctxEntry{{name: "Dockerfile", content: "FROM " + u.Host + "/some/image:1\nRUN true\n"}}))
		wantRefused(t, r, secret, "Dockerfile line 1")
		if hits.Load() != before {
			t.Errorf("the redirect target was fetched %d times", hits.Load()-before)
		}
		check()
	})
	t.Run("attack/M7-local-image-outside-image-dir", func(t *testing.T) {
		// A valid OCI layout outside --image-dir: before the fix, any path
		// on the node was read as an image.
		dir := t.TempDir()
		lp, err := layout.Write(dir, empty.Index)
		if err != nil {
			t.Fatal(err)
		}
		if err := lp.AppendImage(busyboxImage(t, "x")); err != nil {
			t.Fatal(err)
		}
		for _, ref := range []string{"oci-layout://" + dir, "oci-layout:///etc", "docker-archive:///etc/passwd"} {
			tpl := "review-local-" + uniqueTag(t)
			check := e.hostUnchanged(t, tpl)
			r := e.postBuild(t, tpl, contextTar(t, []ctxEntry{{name: "Dockerfile", content: "FROM " + ref + "\nRUN true\n"}}))
			wantRefused(t, r, "", "Dockerfile line 1", "--image-dir")
			check()
		}
	})
	// An allowlisted registry keeps working, and what it answers is reduced
	// to a status and its error codes.
	t.Run("attack/M7-allowlisted-registry-no-body-echo", func(t *testing.T) {
		reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
		defer reg.Close()
		u, _ := url.Parse(reg.URL)
		ref := u.Host + "/review/busy:1"
		nr, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(nr, busyboxImage(t, "x")); err != nil {
			t.Fatal(err)
		}
		// Answers with a body that is not a registry error.
		raw := httptest.NewServer(http.HandlerFunc(internal))
		defer raw.Close()
		ru, _ := url.Parse(raw.URL)
		tpl := "review-echo-" + uniqueTag(t)
		r := e.postBuild(t, tpl, contextTar(t, []ctxEntry{{name: "Dockerfile", content: "FROM " + ru.Host + "/x/y:1\nRUN true\n"}}))
		wantRefused(t, r, secret, "Dockerfile line 1", "403")
		tpl = "review-echo-ok-" + uniqueTag(t)
		t.Cleanup(func() { e.api(t, http.MethodDelete, "/airlock/v1/templates/"+tpl, nil) })
		if r := e.postBuild(t, tpl, contextTar(t, []ctxEntry{{name: "Dockerfile", content: "FROM " + ref + "\nRUN true\n"}})); r.err != "" {
			t.Fatalf("FROM an allowlisted registry: %s\n%s", r.err, r.log)
		}
	})
}

// serveOn serves h on addr (for example "[::1]:0") until the test ends and
// returns its host:port.
func serveOn(t *testing.T, addr string, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on %s: %v", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// uploadLink returns the signed upload URL of a files hash.
func (e env) uploadLink(t *testing.T, templateID, hash string) string {
	t.Helper()
	r := e.api(t, http.MethodGet, "/templates/"+templateID+"/files/"+hash, nil)
	var link struct {
		Present bool   `json:"present"`
		URL     string `json:"url"`
	}
	r.json(t, &link)
	if r.status != http.StatusCreated || link.Present || link.URL == "" {
		t.Fatalf("upload link: %d %s", r.status, r.body)
	}
	return link.URL
}

// uploadTarGz uploads entries (links included) as a file set and returns
// its hash.
func (e env) uploadTarGz(t *testing.T, templateID string, entries []ctxEntry) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(contextTar(t, entries)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	hash := hex.EncodeToString(sum[:])
	res, err := httpClient.Do(mustRequest(t, http.MethodPut, e.uploadLink(t, templateID, hash), buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("upload: %d %s", res.StatusCode, body)
	}
	return hash
}

// gzipBomb is a gzip stream of a tar holding one file, name, of size zero
// bytes: one compressed 64 MiB block of zeros repeated as gzip members (a
// reader joins them), so making it costs one block's compression.
func gzipBomb(t *testing.T, name string, size int64) []byte {
	t.Helper()
	member := func(b []byte) []byte {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(b)
		_ = zw.Close()
		return buf.Bytes()
	}
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	const block = 64 << 20
	if size%block != 0 {
		t.Fatalf("size %d is not a multiple of %d", size, block)
	}
	out := member(hdr.Bytes()[:512])
	zeros := member(make([]byte, block))
	for range size / block {
		out = append(out, zeros...)
	}
	return append(out, member(make([]byte, 1024))...) // the tar's end
}
