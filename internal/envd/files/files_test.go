//go:build linux

package files

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/envd/identity"
	"github.com/airlock-sandbox/airlock/internal/envd/state"
	"github.com/airlock-sandbox/airlock/internal/guest"
)

const testUser = "nobody" // uid/gid 65534 on Debian

type env struct {
	st   *state.State
	srv  *httptest.Server
	done chan struct{} // one value per finished request
	hc   *http.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: acts as other Unix users")
	}
	st := state.New("root")
	h := New(st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan struct{}, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		select {
		case done <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(srv.Close)
	// No transparent gzip: tests control Accept-Encoding themselves.
	hc := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 60 * time.Second}
	return &env{st: st, srv: srv, done: done, hc: hc}
}

// openDir returns a temp dir other users can traverse (t.TempDir is 0700).
func openDir(t *testing.T, mode os.FileMode) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(d, mode); err != nil {
		t.Fatal(err)
	}
	return d
}

func (e *env) url(q url.Values) string { return e.srv.URL + "/files?" + q.Encode() }

type result struct {
	status int
	header http.Header
	body   []byte
}

func (e *env) do(t *testing.T, req *http.Request) result {
	t.Helper()
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return result{resp.StatusCode, resp.Header, b}
}

func (e *env) get(t *testing.T, q url.Values, hdr map[string]string) result {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.url(q), nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return e.do(t, req)
}

func (e *env) postRaw(t *testing.T, q url.Values, body io.Reader, hdr map[string]string) result {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.url(q), body)
	req.Header.Set("Content-Type", "application/octet-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return e.do(t, req)
}

type part struct{ field, filename, content string }

func (e *env) postMultipart(t *testing.T, q url.Values, parts []part, hdr map[string]string) result {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		// Written by hand: CreateFormFile would keep slashes too, but be explicit.
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="%s"; filename="%s"`, p.field, p.filename))
		h.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, p.content)
	}
	mw.Close()
	req, _ := http.NewRequest(http.MethodPost, e.url(q), &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return e.do(t, req)
}

func wantJSONError(t *testing.T, r result, status int, msgContains string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d (body %s)", r.status, status, r.body)
	}
	var m struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("error body is not JSON: %q", r.body)
	}
	if m.Code != status || !strings.Contains(m.Message, msgContains) {
		t.Fatalf("error body %s, want code %d and message containing %q", r.body, status, msgContains)
	}
}

func decodeEntries(t *testing.T, r result) []WrittenEntry {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var out []WrittenEntry
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatalf("decoding %s: %v", r.body, err)
	}
	return out
}

func fileOwner(t *testing.T, p string) (uint32, os.FileMode) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid, fi.Mode().Perm()
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func assertNoTempFiles(t *testing.T, dir string) {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if strings.HasPrefix(de.Name(), TempPrefix) {
			t.Fatalf("leftover temp file %s", de.Name())
		}
	}
}

func TestUploadMultipartSingle(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o755)
	target := filepath.Join(dir, "sub", "hello.txt")
	r := e.postMultipart(t, url.Values{"path": {target}}, []part{{"file", "ignored-name.txt", "hello world"}}, nil)
	got := decodeEntries(t, r)
	if len(got) != 1 || got[0].Path != target || got[0].Name != "hello.txt" || got[0].Type != "file" || got[0].Metadata != nil {
		t.Fatalf("response %s", r.body)
	}
	if !bytes.HasPrefix(r.body, []byte("[")) || strings.Contains(string(r.body), "metadata") {
		t.Fatalf("raw body %s", r.body)
	}
	if readFile(t, target) != "hello world" {
		t.Fatal("content mismatch")
	}
	if _, mode := fileOwner(t, target); mode != 0o644 {
		t.Fatalf("mode %v", mode)
	}
	if _, mode := fileOwner(t, filepath.Dir(target)); mode != 0o755 {
		t.Fatalf("parent mode %v", mode)
	}
	// Overwrite truncates.
	r = e.postMultipart(t, url.Values{"path": {target}}, []part{{"file", "x", "hi"}}, nil)
	decodeEntries(t, r)
	if readFile(t, target) != "hi" {
		t.Fatal("overwrite did not replace the content")
	}
	assertNoTempFiles(t, filepath.Dir(target))
}

func TestUploadMultipartMultiAsUser(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o777)
	a := filepath.Join(dir, "deep", "er", "a.txt")
	b := filepath.Join(dir, "b.txt")
	r := e.postMultipart(t, url.Values{"username": {testUser}}, []part{
		{"file", a, "AAA"},
		{"other", "ignored", "zzz"},
		{"file", b, "BBBB"},
	}, nil)
	got := decodeEntries(t, r)
	if len(got) != 2 || got[0].Path != a || got[1].Path != b || got[0].Name != "a.txt" {
		t.Fatalf("response %s", r.body)
	}
	if readFile(t, a) != "AAA" || readFile(t, b) != "BBBB" {
		t.Fatal("content mismatch")
	}
	for _, p := range []string{a, b, filepath.Join(dir, "deep"), filepath.Join(dir, "deep", "er")} {
		if uid, _ := fileOwner(t, p); uid != 65534 {
			t.Fatalf("%s owned by %d, want nobody", p, uid)
		}
	}
	if _, mode := fileOwner(t, filepath.Join(dir, "deep")); mode != 0o755 {
		t.Fatalf("parent mode %v", mode)
	}

	// The same path twice ⇒ 400.
	r = e.postMultipart(t, nil, []part{{"file", b, "1"}, {"file", b, "2"}}, nil)
	wantJSONError(t, r, 400, "same path")
	// No file part ⇒ 400; no filename and no path ⇒ 400.
	wantJSONError(t, e.postMultipart(t, nil, []part{{"other", "x", "1"}}, nil), 400, "no part named")
	wantJSONError(t, e.postMultipart(t, nil, []part{{"file", "", "1"}}, nil), 400, "no filename")
}

func TestUploadOctetStream(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o755)
	p := filepath.Join(dir, "raw.bin")
	got := decodeEntries(t, e.postRaw(t, url.Values{"path": {p}}, strings.NewReader("raw bytes"), nil))
	if len(got) != 1 || got[0].Path != p || readFile(t, p) != "raw bytes" {
		t.Fatalf("got %v / %q", got, readFile(t, p))
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(strings.Repeat("compressed! ", 1000)))
	zw.Close()
	decodeEntries(t, e.postRaw(t, url.Values{"path": {p}}, &gz, map[string]string{"Content-Encoding": "gzip"}))
	if readFile(t, p) != strings.Repeat("compressed! ", 1000) {
		t.Fatal("gzip body not decoded")
	}
	wantJSONError(t, e.postRaw(t, nil, strings.NewReader("x"), nil), 400, "path query parameter is required")
	wantJSONError(t, e.postRaw(t, url.Values{"path": {p}}, strings.NewReader("not gzip"), map[string]string{"Content-Encoding": "gzip"}), 400, "gzip")
	wantJSONError(t, e.postRaw(t, url.Values{"path": {p}}, strings.NewReader("x"), map[string]string{"Content-Type": "text/plain"}), 400, "unsupported Content-Type")
	wantJSONError(t, e.postRaw(t, url.Values{"path": {dir}}, strings.NewReader("x"), nil), 400, "is a directory")
	if readFile(t, p) != strings.Repeat("compressed! ", 1000) {
		t.Fatal("failed uploads changed the file")
	}
	assertNoTempFiles(t, dir)
}

func TestUploadPermissions(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o755) // root-owned
	victim := filepath.Join(dir, "root-file")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := e.postRaw(t, url.Values{"path": {victim}, "username": {testUser}}, strings.NewReader("pwned"), nil)
	wantJSONError(t, r, 403, "permission denied")
	r = e.postRaw(t, url.Values{"path": {filepath.Join(dir, "new")}, "username": {testUser}}, strings.NewReader("pwned"), nil)
	wantJSONError(t, r, 403, "permission denied")
	if readFile(t, victim) != "precious" {
		t.Fatal("victim modified")
	}

	// /etc/passwd via a traversal relative to nobody's home; guarded by a backup.
	before, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	r = e.postMultipart(t, url.Values{"username": {testUser}}, []part{{"file", "../../../../etc/passwd", "evil::0:0::/:/bin/sh\n"}}, nil)
	if after, _ := os.ReadFile("/etc/passwd"); !bytes.Equal(after, before) {
		_ = os.WriteFile("/etc/passwd", before, 0o644)
		t.Fatal("/etc/passwd was modified (restored)")
	}
	wantJSONError(t, r, 403, "permission denied")

	// Reading a root-only file as nobody ⇒ 403.
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantJSONError(t, e.get(t, url.Values{"path": {secret}, "username": {testUser}}, nil), 403, "permission denied")
	// Unknown user ⇒ 401 for both methods.
	wantJSONError(t, e.get(t, url.Values{"path": {secret}, "username": {"no-such-user-xyz"}}, nil), 401, "invalid username")
	wantJSONError(t, e.postRaw(t, url.Values{"path": {secret}, "username": {"no-such-user-xyz"}}, strings.NewReader("x"), nil), 401, "invalid username")
}

func TestDownload(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o755)
	p := filepath.Join(dir, "data.txt")
	content := strings.Repeat("0123456789", 100)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	r := e.get(t, url.Values{"path": {p}}, nil)
	if r.status != 200 || string(r.body) != content {
		t.Fatalf("status %d body %.40q", r.status, r.body)
	}
	for k, want := range map[string]string{
		"Content-Length":      "1000",
		"Content-Type":        "text/plain; charset=utf-8",
		"Content-Disposition": "inline; filename=data.txt",
		"Vary":                "Accept-Encoding",
		"Accept-Ranges":       "bytes",
	} {
		if got := r.header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if r.header.Get("Last-Modified") == "" || r.header.Get("Content-Encoding") != "" {
		t.Errorf("headers %v", r.header)
	}

	r = e.get(t, url.Values{"path": {p}}, map[string]string{"Range": "bytes=10-14"})
	if r.status != 206 || string(r.body) != "01234" || r.header.Get("Content-Range") != "bytes 10-14/1000" {
		t.Fatalf("range: %d %q %v", r.status, r.body, r.header)
	}

	r = e.get(t, url.Values{"path": {p}}, map[string]string{"Accept-Encoding": "gzip"})
	if r.status != 200 || r.header.Get("Content-Encoding") != "gzip" || r.header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("gzip: %d %v", r.status, r.header)
	}
	zr, err := gzip.NewReader(bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if plain, _ := io.ReadAll(zr); string(plain) != content {
		t.Fatal("gzip body mismatch")
	}
	wantJSONError(t, e.get(t, url.Values{"path": {p}}, map[string]string{"Accept-Encoding": "br, identity;q=0"}), 406, "encoding")

	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ae := range []string{"", "gzip"} {
		r = e.get(t, url.Values{"path": {empty}}, map[string]string{"Accept-Encoding": ae})
		if r.status != 200 || r.header.Get("Content-Length") != "0" || len(r.body) != 0 || r.header.Get("Content-Encoding") != "" {
			t.Fatalf("empty (ae=%q): %d %v %q", ae, r.status, r.header, r.body)
		}
	}

	missing := filepath.Join(dir, "missing.txt")
	wantJSONError(t, e.get(t, url.Values{"path": {missing}}, nil), 404, fmt.Sprintf("path '%s' does not exist", missing))
	wantJSONError(t, e.get(t, url.Values{"path": {dir}}, nil), 400, "is a directory")
}

func TestSignatures(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o755)
	p := filepath.Join(dir, "s.txt")
	if err := os.WriteFile(p, []byte("signed"), 0o644); err != nil {
		t.Fatal(err)
	}
	tok := "secret-token"
	e.st.Init(&tok, nil, nil, nil)

	wantJSONError(t, e.get(t, url.Values{"path": {p}}, nil), 401, "missing signature")
	// Valid, no expiration; the username in the hash is '' when none given.
	q := url.Values{"path": {p}, "signature": {guest.Sign(p, guest.OpRead, "", tok, 0)}}
	if r := e.get(t, q, nil); r.status != 200 || string(r.body) != "signed" {
		t.Fatalf("valid signature: %d %s", r.status, r.body)
	}
	// A read signature does not authorise a write.
	wantJSONError(t, e.postRaw(t, q, strings.NewReader("x"), nil), 401, "invalid signature")
	// Valid write signature with username and future expiration.
	exp := time.Now().Add(time.Minute).Unix()
	wq := url.Values{"path": {p}, "username": {"root"}, "signature": {guest.Sign(p, guest.OpWrite, "root", tok, exp)},
		"signature_expiration": {fmt.Sprint(exp)}}
	decodeEntries(t, e.postRaw(t, wq, strings.NewReader("rewritten"), nil))
	if readFile(t, p) != "rewritten" {
		t.Fatal("signed write did not land")
	}
	// Wrong token / tampered path.
	wantJSONError(t, e.get(t, url.Values{"path": {p}, "signature": {guest.Sign(p, guest.OpRead, "", "other", 0)}}, nil), 401, "invalid signature")
	wantJSONError(t, e.get(t, url.Values{"path": {p + "x"}, "signature": {guest.Sign(p, guest.OpRead, "", tok, 0)}}, nil), 401, "invalid signature")
	// Expired: exact body.
	old := time.Now().Add(-time.Minute).Unix()
	r := e.get(t, url.Values{"path": {p}, "signature": {guest.Sign(p, guest.OpRead, "", tok, old)}, "signature_expiration": {fmt.Sprint(old)}}, nil)
	if r.status != 401 || strings.TrimSpace(string(r.body)) != `{"code":401,"message":"signature is already expired"}` {
		t.Fatalf("expired: %d %s", r.status, r.body)
	}
	// Header precedence: a present header decides, whatever the signature says.
	wantJSONError(t, e.get(t, q, map[string]string{AccessTokenHeader: "wrong"}), 401, "does not match")
	bad := url.Values{"path": {p}, "signature": {"v1_garbage"}}
	if r := e.get(t, bad, map[string]string{AccessTokenHeader: tok}); r.status != 200 {
		t.Fatalf("correct header with bad signature: %d %s", r.status, r.body)
	}
}

func TestMetadataXattrs(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o755)
	probe := filepath.Join(dir, "probe")
	os.WriteFile(probe, nil, 0o644)
	if err := unix.Setxattr(probe, "user.test", []byte("1"), 0); err != nil {
		t.Fatalf("temp dir filesystem lacks user xattrs: %v", err)
	}
	p := filepath.Join(dir, "m.txt")
	r := e.postRaw(t, url.Values{"path": {p}}, strings.NewReader("x"), map[string]string{"X-Metadata-Owner-Team": "Blue", "X-Metadata-Build": "7"})
	got := decodeEntries(t, r)
	if got[0].Metadata["owner-team"] != "Blue" || got[0].Metadata["build"] != "7" || len(got[0].Metadata) != 2 {
		t.Fatalf("response metadata %s", r.body)
	}
	xa := func(name string) (string, error) {
		buf := make([]byte, 64)
		n, err := unix.Getxattr(p, name, buf)
		return string(buf[:max(n, 0)]), err
	}
	if v, err := xa("user.e2b.owner-team"); err != nil || v != "Blue" {
		t.Fatalf("xattr owner-team = %q, %v", v, err)
	}
	// New set replaces the previous one.
	decodeEntries(t, e.postMultipart(t, url.Values{"path": {p}}, []part{{"file", "m", "y"}}, map[string]string{"X-Metadata-Other": "o"}))
	if _, err := xa("user.e2b.owner-team"); !errors.Is(err, unix.ENODATA) {
		t.Fatalf("old metadata survived: %v", err)
	}
	if v, _ := xa("user.e2b.other"); v != "o" {
		t.Fatalf("other = %q", v)
	}
	// No metadata headers: the overwritten file's metadata is cleared (E2B).
	decodeEntries(t, e.postRaw(t, url.Values{"path": {p}}, strings.NewReader("z"), nil))
	if v, err := xa("user.e2b.other"); !errors.Is(err, unix.ENODATA) || readFile(t, p) != "z" {
		t.Fatalf("metadata kept on plain overwrite: %q, %v", v, err)
	}
}

func TestOutOfSpace(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o755)
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m,mode=0755"); err != nil {
		t.Fatalf("mounting tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	p := filepath.Join(dir, "big")
	os.WriteFile(p, []byte("old"), 0o644)
	r := e.postRaw(t, url.Values{"path": {p}}, io.LimitReader(zeroReader{}, 4<<20), nil)
	wantJSONError(t, r, 507, "no space")
	if readFile(t, p) != "old" {
		t.Fatal("old content lost")
	}
	assertNoTempFiles(t, dir)
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestAbortedUploadKeepsOldContent(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o755)
	p := filepath.Join(dir, "keep.txt")
	if err := os.WriteFile(p, []byte("original"), 0o644); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /files?path=%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000000\r\n\r\n", url.QueryEscape(p))
	conn.Write(bytes.Repeat([]byte("N"), 300000))
	time.Sleep(100 * time.Millisecond)
	conn.Close()
	select {
	case <-e.done:
	case <-time.After(10 * time.Second):
		t.Fatal("handler did not finish after the client went away")
	}
	if got := readFile(t, p); got != "original" {
		t.Fatalf("content after aborted upload: %.20q", got)
	}
	assertNoTempFiles(t, dir)
}

// genReader yields n deterministic pseudo-random bytes without storing them.
type genReader struct {
	src *rand.ChaCha8
	n   int64
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > g.n {
		p = p[:g.n]
	}
	g.src.Read(p)
	g.n -= int64(len(p))
	return len(p), nil
}

func TestUpload1GiBStreamed(t *testing.T) {
	if testing.Short() {
		t.Skip("1 GiB transfer skipped in -short mode")
	}
	e := newEnv(t)
	dir := openDir(t, 0o755)
	p := filepath.Join(dir, "big.bin")
	const size = 1 << 30
	h := sha256.New()
	src := io.TeeReader(&genReader{src: rand.NewChaCha8([32]byte{1, 2, 3}), n: size}, h)

	runtime.GC()
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, e.url(url.Values{"path": {p}}), src)
	req.Header.Set("Content-Type", "application/octet-stream")
	req.ContentLength = size
	r := e.do(t, req)
	elapsed := time.Since(start)
	close(stop)
	<-sampled
	decodeEntries(t, r)

	fi, err := os.Stat(p)
	if err != nil || fi.Size() != size {
		t.Fatalf("size %v, %v", fi, err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h2 := sha256.New()
	if _, err := io.Copy(h2, f); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(h.Sum(nil), h2.Sum(nil)) {
		t.Fatal("sha256 mismatch")
	}
	t.Logf("1 GiB upload: %v (%.0f MiB/s), peak heap in use %.1f MiB (client+server in one process)",
		elapsed, float64(size)/(1<<20)/elapsed.Seconds(), float64(peak.Load())/(1<<20))
	if peak.Load() > 64<<20 {
		t.Fatalf("peak heap %d MiB: upload is being buffered", peak.Load()>>20)
	}
}

// TestUploadEmitsWriteForDestination: watchers (and SDK tests waiting for a
// WRITE of the written name) must see the destination, not only a rename.
func TestUploadEmitsWriteForDestination(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o755)
	p := filepath.Join(dir, "watched.txt")
	os.WriteFile(p, []byte("v1"), 0o644)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	decodeEntries(t, e.postRaw(t, url.Values{"path": {p}}, strings.NewReader("v2"), nil))
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev := <-w.Events:
			if ev.Name == p && ev.Has(fsnotify.Write) {
				return
			}
		case <-timeout:
			t.Fatal("no WRITE event for the destination name")
		}
	}
}

// TestUploadCreatesParentsAsRoot: missing parent directories are created
// with root rights and handed to the writing user (E2B's envd); existing
// directories keep their owner and mode.
func TestUploadCreatesParentsAsRoot(t *testing.T) {
	e := newEnv(t)
	nobody, err := identity.Lookup(testUser)
	if err != nil {
		t.Fatal(err)
	}
	dir := openDir(t, 0o755) // root-owned: nobody cannot create entries here
	existing := filepath.Join(dir, "existing")
	if err := os.Mkdir(existing, 0o755); err != nil { // nobody may enter, not write
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, "a", "b", "c.txt"), filepath.Join(existing, "new", "d.txt")} {
		r := e.postRaw(t, url.Values{"path": {p}, "username": {testUser}}, strings.NewReader("data"), nil)
		if r.status != 200 {
			t.Fatalf("write %s: %d %s", p, r.status, r.body)
		}
		if readFile(t, p) != "data" {
			t.Fatalf("%s content", p)
		}
	}
	owned := func(p string, uid uint32, mode os.FileMode) {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != uid || fi.Mode().Perm() != mode {
			t.Errorf("%s: uid %d mode %v, want uid %d mode %v", p, st.Uid, fi.Mode().Perm(), uid, mode)
		}
	}
	owned(filepath.Join(dir, "a"), nobody.UID, 0o755)
	owned(filepath.Join(dir, "a", "b"), nobody.UID, 0o755)
	owned(filepath.Join(dir, "a", "b", "c.txt"), nobody.UID, 0o644)
	owned(filepath.Join(existing, "new"), nobody.UID, 0o755)
	owned(filepath.Join(existing, "new", "d.txt"), nobody.UID, 0o644)
	owned(existing, 0, 0o755) // left as it was
	owned(dir, 0, 0o755)

	// A parent that is a file is a 400, not a directory created over it.
	r := e.postRaw(t, url.Values{"path": {filepath.Join(dir, "a", "b", "c.txt", "x")}, "username": {testUser}}, strings.NewReader("x"), nil)
	wantJSONError(t, r, 400, "not a directory")
}

// testUploadParentSwapRace: a sandbox process that swaps a directory the
// agent just made (as root) for a symlink to a root file does not get that
// file chmod'ed 0755 or chowned (review R2-3). The swap happens exactly in
// the window through the afterMkdir hook.
func testUploadParentSwapRace(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o777) // the user's own writable directory
	victim := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(victim, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	newDir := filepath.Join(dir, "new")
	afterMkdir = func(d string) {
		if d != newDir {
			return
		}
		if err := os.Rename(d, d+".moved"); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(victim, d); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { afterMkdir = func(string) {} })
	r := e.postRaw(t, url.Values{"path": {filepath.Join(newDir, "f.txt")}, "username": {testUser}}, strings.NewReader("data"), nil)
	if r.status < 400 {
		t.Errorf("upload through a swapped parent: status %d %s, want an error", r.status, r.body)
	}
	fi, err := os.Stat(victim)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o600 || st.Uid != 0 {
		t.Fatalf("victim is now %v uid %d: the agent followed the swapped-in symlink", fi.Mode().Perm(), st.Uid)
	}
}

// TestReviewUploads runs the attack of the security review (issue 23) this file tests,
// named for the reliability report (docs/RELIABILITY.md).
func TestReviewUploads(t *testing.T) {
	t.Run("attack/R2-3-upload-parent-swapped-for-symlink", testUploadParentSwapRace)
}
