//go:build linux

package files

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/envd/filesystem"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb/filesystempbconnect"
)

// metaEnv is a /files handler plus a Filesystem service sharing the default
// metadata store.
type metaEnv struct {
	*env
	fs filesystempbconnect.FilesystemClient
}

func newMetaEnv(t *testing.T) *metaEnv {
	t.Helper()
	e := newEnv(t)
	svc := filesystem.New(e.st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	mux := http.NewServeMux()
	mux.Handle(filesystempbconnect.NewFilesystemHandler(svc))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		_ = svc.Close()
	})
	return &metaEnv{env: e,
		fs: filesystempbconnect.NewFilesystemClient(srv.Client(), srv.URL, connect.WithProtoJSON())}
}

func basic[T any](msg *T) *connect.Request[T] {
	r := connect.NewRequest(msg)
	r.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(testUser+":")))
	return r
}

func (m *metaEnv) statMeta(t *testing.T, p string) map[string]string {
	t.Helper()
	res, err := m.fs.Stat(context.Background(), basic(&filesystempb.StatRequest{Path: p}))
	if err != nil {
		t.Fatalf("stat %s: %v", p, err)
	}
	return res.Msg.GetEntry().GetMetadata()
}

// metadataLifecycle runs the E2B metadata scenario as an unprivileged user
// in dir, whose filesystem has user xattrs.
func metadataLifecycle(t *testing.T, m *metaEnv, dir string) {
	ctx := context.Background()
	p := filepath.Join(dir, "m.txt")
	q := url.Values{"path": {p}, "username": {testUser}}

	// Upload with metadata: response, Stat and ListDir show it.
	want := map[string]string{"owner-team": "Blue", "build": "7"}
	got := decodeEntries(t, m.postRaw(t, q, strings.NewReader("x"), map[string]string{"X-Metadata-Owner-Team": "Blue", "X-Metadata-Build": "7"}))
	if !maps.Equal(got[0].Metadata, want) {
		t.Fatalf("response metadata %v", got[0].Metadata)
	}
	if md := m.statMeta(t, p); !maps.Equal(md, want) {
		t.Fatalf("stat metadata %v, want %v", md, want)
	}
	ls, err := m.fs.ListDir(ctx, basic(&filesystempb.ListDirRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	if len(ls.Msg.GetEntries()) != 1 || !maps.Equal(ls.Msg.GetEntries()[0].GetMetadata(), want) {
		t.Fatalf("listdir %v", ls.Msg.GetEntries())
	}
	if n, _ := unix.Listxattr(p, nil); n == 0 {
		t.Fatal("metadata is not in xattrs")
	}

	// Overwrite without metadata clears the set, as on E2B (response and
	// Stat): the new inode has no xattrs.
	r0 := m.postRaw(t, q, strings.NewReader("z"), nil)
	if got := decodeEntries(t, r0); got[0].Metadata != nil {
		t.Fatalf("plain overwrite response has metadata: %s", r0.body)
	}
	if md := m.statMeta(t, p); len(md) != 0 || readFile(t, p) != "z" {
		t.Fatalf("metadata after plain overwrite %v", md)
	}
	if n, _ := unix.Listxattr(p, nil); n != 0 {
		t.Fatal("plain overwrite kept xattrs")
	}

	// Overwrite with metadata replaces the set (multipart this time).
	r := m.postMultipart(t, q, []part{{"file", "m", "y"}}, map[string]string{"X-Metadata-Other": "o"})
	if got := decodeEntries(t, r); !maps.Equal(got[0].Metadata, map[string]string{"other": "o"}) {
		t.Fatalf("response %s", r.body)
	}
	if md := m.statMeta(t, p); !maps.Equal(md, map[string]string{"other": "o"}) {
		t.Fatalf("metadata after replacing overwrite %v", md)
	}

	// Move keeps it.
	moved := filepath.Join(dir, "sub", "moved.txt")
	if _, err := m.fs.Move(ctx, basic(&filesystempb.MoveRequest{Source: p, Destination: moved})); err != nil {
		t.Fatal(err)
	}
	if md := m.statMeta(t, moved); md["other"] != "o" || len(md) != 1 {
		t.Fatalf("metadata after move %v", md)
	}

	// Remove drops it; a new file at the old place has none.
	if _, err := m.fs.Remove(ctx, basic(&filesystempb.RemoveRequest{Path: moved})); err != nil {
		t.Fatal(err)
	}
	r = m.postRaw(t, url.Values{"path": {moved}, "username": {testUser}}, strings.NewReader("new"), nil)
	if got := decodeEntries(t, r); got[0].Metadata != nil {
		t.Fatalf("new file response has metadata: %s", r.body)
	}
	if md := m.statMeta(t, moved); len(md) != 0 {
		t.Fatalf("new file inherited metadata %v", md)
	}
}

// TestMetadataLifecycle: upload, stat, list, overwrite, move and remove
// with metadata, as an unprivileged user, on a filesystem with user xattrs
// (as gVisor's root filesystem has since the pinned runsc, and a microVM's).
func TestMetadataLifecycle(t *testing.T) {
	metadataLifecycle(t, newMetaEnv(t), openDir(t, 0o777))
}

// TestMetadataOnRamfs: a filesystem without user xattrs refuses an upload
// that sets metadata (400, the old content kept, no temp file left) and
// takes plain uploads. (The fallback store for gVisor 20221219's root
// filesystem, which had no user xattrs, is gone.)
func TestMetadataOnRamfs(t *testing.T) {
	m := newMetaEnv(t)
	dir := openDir(t, 0o755)
	if err := unix.Mount("ramfs", dir, "ramfs", 0, "mode=0777"); err != nil {
		t.Fatalf("mounting ramfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	p := filepath.Join(dir, "m.txt")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(p, "user.test", []byte("1"), 0); err == nil {
		t.Fatal("ramfs unexpectedly supports user xattrs; this test needs a filesystem without them")
	}
	q := url.Values{"path": {p}}
	r := m.postRaw(t, q, strings.NewReader("new"), map[string]string{"X-Metadata-Owner": "Blue"})
	wantJSONError(t, r, http.StatusBadRequest, "extended attributes")
	if readFile(t, p) != "old" {
		t.Fatal("refused upload replaced the file")
	}
	assertNoTempFiles(t, dir)
	got := decodeEntries(t, m.postRaw(t, q, strings.NewReader("plain"), nil))
	if got[0].Metadata != nil || readFile(t, p) != "plain" {
		t.Fatalf("plain upload: %+v", got[0])
	}
	if md := m.statMeta(t, p); len(md) != 0 {
		t.Fatalf("stat metadata on ramfs %v", md)
	}
}
