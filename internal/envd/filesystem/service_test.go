//go:build linux

package filesystem

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/envd/state"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb/filesystempbconnect"
)

const testUser = "nobody" // exists on every Debian system; uid/gid 65534

type env struct {
	st     *state.State
	svc    *Service
	srv    *httptest.Server
	client filesystempbconnect.FilesystemClient
}

func newEnv(t *testing.T) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: acts as other Unix users")
	}
	st := state.New("root")
	svc := New(st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	mux := http.NewServeMux()
	path, h := filesystempbconnect.NewFilesystemHandler(svc)
	mux.Handle(path, FeedFlushes(h))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		_ = svc.Close()
	})
	return &env{st: st, svc: svc, srv: srv,
		client: filesystempbconnect.NewFilesystemClient(srv.Client(), srv.URL, connect.WithProtoJSON())}
}

// openDir returns a temp dir that other users can traverse (t.TempDir is 0700).
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

func asUser[T any](name string, msg *T) *connect.Request[T] {
	r := connect.NewRequest(msg)
	r.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(name+":")))
	return r
}

func wantCode(t *testing.T, err error, code connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("want %v error, got success", code)
	}
	if got := connect.CodeOf(err); got != code {
		t.Fatalf("want code %v, got %v (%v)", code, got, err)
	}
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestStat(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dir := openDir(t, 0o755)
	f := filepath.Join(dir, "a.txt")
	writeFile(t, f, "hello")
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	if err := os.Chtimes(f, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(f, "user.e2b.color", []byte("blue"), 0); err != nil {
		t.Fatalf("xattrs unsupported on %s: %v", dir, err)
	}
	if err := unix.Setxattr(f, "user.other", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}

	res, err := e.client.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: f}))
	if err != nil {
		t.Fatal(err)
	}
	got := res.Msg.GetEntry()
	if got.GetName() != "a.txt" || got.GetPath() != f || got.GetType() != filesystempb.FileType_FILE_TYPE_FILE ||
		got.GetSize() != 5 || got.GetMode() != 0o644 || got.GetPermissions() != "-rw-r--r--" ||
		got.GetOwner() != "root" || got.GetGroup() != "root" || !got.GetModifiedTime().AsTime().Equal(mtime) ||
		got.SymlinkTarget != nil {
		t.Fatalf("unexpected entry: %v", got)
	}
	if len(got.GetMetadata()) != 1 || got.GetMetadata()["color"] != "blue" {
		t.Fatalf("metadata = %v, want only color=blue", got.GetMetadata())
	}

	// Directory.
	res, err = e.client.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.GetEntry().GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY || res.Msg.GetEntry().GetPermissions() != "drwxr-xr-x" {
		t.Fatalf("dir entry: %v", res.Msg.GetEntry())
	}

	// Symlink to the file: target's type, resolved target, link's own permissions string.
	link := filepath.Join(dir, "link")
	if err := os.Symlink("a.txt", link); err != nil {
		t.Fatal(err)
	}
	res, err = e.client.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: link}))
	if err != nil {
		t.Fatal(err)
	}
	got = res.Msg.GetEntry()
	if got.GetType() != filesystempb.FileType_FILE_TYPE_FILE || got.GetSymlinkTarget() != f ||
		got.GetPath() != link || got.GetMode() != 0o644 || got.GetPermissions() != "Lrwxrwxrwx" {
		t.Fatalf("symlink entry: %v", got)
	}

	// Broken symlink: UNSPECIFIED.
	broken := filepath.Join(dir, "broken")
	if err := os.Symlink("nowhere", broken); err != nil {
		t.Fatal(err)
	}
	res, err = e.client.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: broken}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.GetEntry().GetType() != filesystempb.FileType_FILE_TYPE_UNSPECIFIED {
		t.Fatalf("broken symlink type = %v", res.Msg.GetEntry().GetType())
	}

	_, err = e.client.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: filepath.Join(dir, "missing")}))
	wantCode(t, err, connect.CodeNotFound)

	// Empty path resolves to the default workdir.
	e.st.Init(nil, nil, &dir, nil)
	res, err = e.client.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.GetEntry().GetPath() != dir {
		t.Fatalf("empty path resolved to %q, want %q", res.Msg.GetEntry().GetPath(), dir)
	}
}

// TestWireJSON checks the raw proto3 JSON an SDK sees.
func TestWireJSON(t *testing.T) {
	e := newEnv(t)
	dir := openDir(t, 0o755)
	writeFile(t, filepath.Join(dir, "f"), "12345")
	if err := os.Symlink("f", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"path": filepath.Join(dir, "l")})
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/filesystem.Filesystem/Stat", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	var m struct {
		Entry map[string]any `json:"entry"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"type": "FILE_TYPE_FILE", "size": "1" /* lstat size of the link, as infra */, "symlinkTarget": filepath.Join(dir, "f"), "mode": float64(0o644),
		"permissions": "Lrwxrwxrwx", "owner": "root",
	} {
		if m.Entry[k] != want {
			t.Errorf("key %q = %#v, want %#v (body %s)", k, m.Entry[k], want, raw)
		}
	}
	if ts, ok := m.Entry["modifiedTime"].(string); !ok || !strings.HasSuffix(ts, "Z") {
		t.Errorf("modifiedTime = %#v, want RFC 3339 string", m.Entry["modifiedTime"])
	}

	// Error body: Connect JSON error with status 404.
	body, _ = json.Marshal(map[string]any{"path": filepath.Join(dir, "nope")})
	req, _ = http.NewRequest(http.MethodPost, e.srv.URL+"/filesystem.Filesystem/Stat", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	raw, _ = io.ReadAll(resp2.Body)
	if resp2.StatusCode != 404 || !strings.Contains(string(raw), `"code":"not_found"`) {
		t.Fatalf("missing stat: %d %s", resp2.StatusCode, raw)
	}
}

func TestUserSelection(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	_, err := e.client.Stat(ctx, asUser("no-such-user-xyz", &filesystempb.StatRequest{Path: "/"}))
	wantCode(t, err, connect.CodeUnauthenticated)
	if !strings.Contains(err.Error(), "invalid username") {
		t.Fatalf("message: %v", err)
	}
	// An unknown default user is rejected the same way.
	bad := "no-such-default-xyz"
	e.st.Init(nil, &bad, nil, nil)
	_, err = e.client.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "/"}))
	wantCode(t, err, connect.CodeUnauthenticated)
}

func TestMakeDir(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dir := openDir(t, 0o777)
	target := filepath.Join(dir, "a", "b", "c")
	res, err := e.client.MakeDir(ctx, asUser(testUser, &filesystempb.MakeDirRequest{Path: target}))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Msg.GetEntry(); got.GetPath() != target || got.GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY ||
		got.GetOwner() != testUser || got.GetMode() != 0o755 {
		t.Fatalf("entry: %v", got)
	}
	for _, p := range []string{filepath.Join(dir, "a"), filepath.Join(dir, "a", "b"), target} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 65534 || fi.Mode().Perm() != 0o755 {
			t.Fatalf("%s: uid %d mode %v, want 65534 0755", p, st.Uid, fi.Mode().Perm())
		}
	}
	_, err = e.client.MakeDir(ctx, asUser(testUser, &filesystempb.MakeDirRequest{Path: target}))
	wantCode(t, err, connect.CodeAlreadyExists)

	f := filepath.Join(dir, "file")
	writeFile(t, f, "x")
	_, err = e.client.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: f}))
	wantCode(t, err, connect.CodeInvalidArgument)

	// nobody cannot create inside a root-owned 0755 directory.
	locked := openDir(t, 0o755)
	_, err = e.client.MakeDir(ctx, asUser(testUser, &filesystempb.MakeDirRequest{Path: filepath.Join(locked, "x")}))
	wantCode(t, err, connect.CodePermissionDenied)
	if _, err := os.Stat(filepath.Join(locked, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("directory was created despite permission error: %v", err)
	}
}

func TestMove(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dir := openDir(t, 0o755)
	src := filepath.Join(dir, "src.txt")
	writeFile(t, src, "data")
	dst := filepath.Join(dir, "new", "deeper", "dst.txt")
	res, err := e.client.Move(ctx, connect.NewRequest(&filesystempb.MoveRequest{Source: src, Destination: dst}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.GetEntry().GetPath() != dst || res.Msg.GetEntry().GetName() != "dst.txt" || res.Msg.GetEntry().GetSize() != 4 {
		t.Fatalf("entry: %v", res.Msg.GetEntry())
	}
	if b, err := os.ReadFile(dst); err != nil || string(b) != "data" {
		t.Fatalf("destination content %q, %v", b, err)
	}
	if _, err := os.Stat(src); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("source still exists: %v", err)
	}
	_, err = e.client.Move(ctx, connect.NewRequest(&filesystempb.MoveRequest{Source: src, Destination: dst + "2"}))
	wantCode(t, err, connect.CodeNotFound)

	// nobody cannot move a root file out of a root-owned directory.
	_, err = e.client.Move(ctx, asUser(testUser, &filesystempb.MoveRequest{Source: dst, Destination: filepath.Join(dir, "stolen")}))
	wantCode(t, err, connect.CodePermissionDenied)
}

func TestListDir(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dir := openDir(t, 0o755)
	for _, d := range []string{"sub", "sub/deeper", "sub/deeper/deepest"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "top.txt"), "t")
	writeFile(t, filepath.Join(dir, "sub", "mid.txt"), "m")
	writeFile(t, filepath.Join(dir, "sub", "deeper", "low.txt"), "l")

	list := func(path string, depth uint32) []string {
		t.Helper()
		res, err := e.client.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: path, Depth: depth}))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, en := range res.Msg.GetEntries() {
			out = append(out, en.GetPath())
		}
		slices.Sort(out)
		return out
	}
	rel := func(base string, ps ...string) []string {
		var out []string
		for _, p := range ps {
			out = append(out, filepath.Join(base, p))
		}
		slices.Sort(out)
		return out
	}
	if got, want := list(dir, 0), rel(dir, "sub", "top.txt"); !slices.Equal(got, want) {
		t.Fatalf("depth 0: %v, want %v", got, want)
	}
	if got, want := list(dir, 1), rel(dir, "sub", "top.txt"); !slices.Equal(got, want) {
		t.Fatalf("depth 1: %v, want %v", got, want)
	}
	if got, want := list(dir, 2), rel(dir, "sub", "top.txt", "sub/mid.txt", "sub/deeper"); !slices.Equal(got, want) {
		t.Fatalf("depth 2: %v, want %v", got, want)
	}
	if got, want := list(dir, 10), rel(dir, "sub", "top.txt", "sub/mid.txt", "sub/deeper", "sub/deeper/low.txt", "sub/deeper/deepest"); !slices.Equal(got, want) {
		t.Fatalf("depth 10: %v, want %v", got, want)
	}
	// Through a symlink: children reported under the link path.
	link := filepath.Join(openDir(t, 0o755), "link")
	if err := os.Symlink(filepath.Join(dir, "sub"), link); err != nil {
		t.Fatal(err)
	}
	if got, want := list(link, 1), rel(link, "mid.txt", "deeper"); !slices.Equal(got, want) {
		t.Fatalf("via symlink: %v, want %v", got, want)
	}
	_, err := e.client.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: filepath.Join(dir, "top.txt")}))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = e.client.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: filepath.Join(dir, "missing")}))
	wantCode(t, err, connect.CodeNotFound)

	private := openDir(t, 0o700)
	_, err = e.client.ListDir(ctx, asUser(testUser, &filesystempb.ListDirRequest{Path: private}))
	wantCode(t, err, connect.CodePermissionDenied)
}

func TestRemove(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dir := openDir(t, 0o755)
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(tree, "a", "b", "f"), "x")
	if _, err := e.client.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: tree})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tree); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("tree still exists: %v", err)
	}
	if _, err := e.client.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: tree})); err != nil {
		t.Fatalf("removing a missing path: %v", err)
	}
	keep := filepath.Join(dir, "keep")
	writeFile(t, keep, "x")
	_, err := e.client.Remove(ctx, asUser(testUser, &filesystempb.RemoveRequest{Path: keep}))
	wantCode(t, err, connect.CodePermissionDenied)
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("file removed despite permission error: %v", err)
	}
}

func TestMountTypeFrom(t *testing.T) {
	const info = `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:26 / /proc rw,nosuid - proc proc rw
40 22 0:40 / /mnt/share rw - nfs4 server:/export rw,vers=4.2
41 40 0:41 / /mnt/share/inner rw - tmpfs tmpfs rw
42 22 0:42 / /mnt/with\040space rw - fuse.sshfs host:/ rw
`
	for path, want := range map[string]string{
		"/":                      "ext4",
		"/home/user":             "ext4",
		"/mnt/share":             "nfs4",
		"/mnt/share/x/y":         "nfs4",
		"/mnt/share/inner/z":     "tmpfs",
		"/mnt/sharefoo":          "ext4",
		"/mnt/with space/a":      "fuse.sshfs",
		"/proc/self":             "proc",
		"/mnt/with\\040space/zz": "ext4",
	} {
		got, err := mountTypeFrom(strings.NewReader(info), path)
		if err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", path, got, err, want)
		}
	}
	if !networkFSTypes["nfs4"] || !networkFSTypes["fuse.sshfs"] || !networkFSTypes["cifs"] || networkFSTypes["9p"] || networkFSTypes["ext4"] {
		t.Fatal("network filesystem table is wrong")
	}
	// The real table contains the temp dir's filesystem (not a network one).
	got, err := mountType(t.TempDir())
	if err != nil || got == "" || networkFSTypes[got] {
		t.Fatalf("mountType(tempdir) = %q, %v", got, err)
	}
}

func TestKeepaliveInterval(t *testing.T) {
	for in, want := range map[string]time.Duration{"": DefaultKeepalive, "50": 50 * time.Second, "x": DefaultKeepalive, "-3": DefaultKeepalive, " 2 ": 2 * time.Second} {
		if got := keepaliveInterval(in); got != want {
			t.Errorf("%q: %v want %v", in, got, want)
		}
	}
}
