//go:build linux

package files

import (
	"context"
	"encoding/base64"
	"fmt"
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
	"github.com/airlock-sandbox/airlock/internal/envd/gen/filesystempb"
	"github.com/airlock-sandbox/airlock/internal/envd/gen/filesystempb/filesystempbconnect"
)

// TestMain keeps every test away from the real DefaultMetadataDir.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "files-metastore-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	filesystem.SetDefaultMetadataStore(filesystem.NewMetadataStore(filepath.Join(dir, "metadata")))
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// metaEnv is a /files handler plus a Filesystem service sharing store.
type metaEnv struct {
	*env
	fs    filesystempbconnect.FilesystemClient
	store *filesystem.MetadataStore
}

func newMetaEnv(t *testing.T, store *filesystem.MetadataStore) *metaEnv {
	t.Helper()
	prev := filesystem.SetDefaultMetadataStore(store)
	t.Cleanup(func() { filesystem.SetDefaultMetadataStore(prev) })
	e := newEnv(t) // captures store
	svc := filesystem.New(e.st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	mux := http.NewServeMux()
	mux.Handle(filesystempbconnect.NewFilesystemHandler(svc))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		_ = svc.Close()
	})
	return &metaEnv{env: e, store: store,
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

func (m *metaEnv) entryFiles(t *testing.T) []string {
	t.Helper()
	des, err := os.ReadDir(m.store.Dir())
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

// metadataLifecycle runs the E2B metadata scenario as an unprivileged user
// in dir, whose filesystem (real or simulated) has no user xattrs.
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
	if n, _ := unix.Listxattr(p, nil); n != 0 {
		t.Fatal("metadata went into real xattrs")
	}
	if fi, err := os.Stat(m.store.Dir()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("store dir %v %v", fi, err)
	}

	// Overwrite without metadata clears the set, as on E2B (response and
	// Stat); the old inode's entry is gone and the new one has none.
	r0 := m.postRaw(t, q, strings.NewReader("z"), nil)
	if got := decodeEntries(t, r0); got[0].Metadata != nil {
		t.Fatalf("plain overwrite response has metadata: %s", r0.body)
	}
	if md := m.statMeta(t, p); len(md) != 0 || readFile(t, p) != "z" {
		t.Fatalf("metadata after plain overwrite %v", md)
	}
	if n := len(m.entryFiles(t)); n != 0 {
		t.Fatalf("%d store entries, want 0", n)
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
	if n := len(m.entryFiles(t)); n != 0 {
		t.Fatalf("%d store entries after remove", n)
	}
	r = m.postRaw(t, url.Values{"path": {moved}, "username": {testUser}}, strings.NewReader("new"), nil)
	if got := decodeEntries(t, r); got[0].Metadata != nil {
		t.Fatalf("new file response has metadata: %s", r.body)
	}
	if md := m.statMeta(t, moved); len(md) != 0 {
		t.Fatalf("new file inherited metadata %v", md)
	}
}

// TestMetadataWithoutXattrs: xattrs forced to fail with EOPNOTSUPP (as on
// gVisor's gofer root filesystem); metadata lives in the fallback store.
func TestMetadataWithoutXattrs(t *testing.T) {
	m := newMetaEnv(t, filesystem.NewMetadataStore(filepath.Join(t.TempDir(), "meta"), filesystem.WithoutXattrs()))
	metadataLifecycle(t, m, openDir(t, 0o777))
}

// TestMetadataOnRamfs uses a real filesystem without user xattrs.
func TestMetadataOnRamfs(t *testing.T) {
	m := newMetaEnv(t, filesystem.NewMetadataStore(filepath.Join(t.TempDir(), "meta")))
	dir := openDir(t, 0o755)
	if err := unix.Mount("ramfs", dir, "ramfs", 0, "mode=0777"); err != nil {
		t.Fatalf("mounting ramfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	probe := filepath.Join(dir, "probe")
	if err := os.WriteFile(probe, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(probe, "user.test", []byte("1"), 0); err == nil {
		t.Fatal("ramfs unexpectedly supports user xattrs; this test needs a filesystem without them")
	}
	if err := os.Remove(probe); err != nil {
		t.Fatal(err)
	}
	metadataLifecycle(t, m, dir)
}
