//go:build linux

package filesystem

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/envd/gen/filesystempb"
)

// TestMain keeps every test (including those that only use the default
// store) away from the real DefaultMetadataDir.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "metastore-default-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	SetDefaultMetadataStore(NewMetadataStore(filepath.Join(dir, "metadata")))
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// storeFiles returns the entry files in the store directory.
func storeFiles(t *testing.T, s *MetadataStore) []string {
	t.Helper()
	des, err := os.ReadDir(s.Dir())
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

// remember writes content to p (as an upload would: temp file renamed into
// place) and records meta for it in s.
func remember(t *testing.T, s *MetadataStore, p, content string, meta map[string]string) {
	t.Helper()
	tmp := p + ".tmp"
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := s.SetXattrs(f, meta); err == nil {
		t.Fatal("SetXattrs succeeded on a store without xattrs")
	}
	if err := s.Remember(f, p, meta); err != nil {
		t.Fatal(err)
	}
}

func statMeta(t *testing.T, e *env, p string) map[string]string {
	t.Helper()
	res, err := e.client.Stat(context.Background(), asUser(testUser, &filesystempb.StatRequest{Path: p}))
	if err != nil {
		t.Fatalf("stat %s: %v", p, err)
	}
	return res.Msg.GetEntry().GetMetadata()
}

func TestMetadataFallbackService(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	store := NewMetadataStore(filepath.Join(t.TempDir(), "meta"), WithoutXattrs())
	e.svc.names.meta = store
	dir := openDir(t, 0o777)
	p := filepath.Join(dir, "a.txt")
	want := map[string]string{"owner-team": "Blue", "build": "7"}
	remember(t, store, p, "hello", want)

	// The store directory is root-only; nothing went into real xattrs.
	fi, err := os.Stat(store.Dir())
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("store dir: %v %v", fi, err)
	}
	if n, _ := unix.Listxattr(p, nil); n != 0 {
		t.Fatalf("real xattrs were written (%d bytes of names)", n)
	}
	if got := storeFiles(t, store); len(got) != 1 {
		t.Fatalf("store files %v", got)
	}

	// Stat and ListDir as an unprivileged user (the store is root-only).
	if got := statMeta(t, e, p); !maps.Equal(got, want) {
		t.Fatalf("stat metadata %v, want %v", got, want)
	}
	ls, err := e.client.ListDir(ctx, asUser(testUser, &filesystempb.ListDirRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	if len(ls.Msg.GetEntries()) != 1 || !maps.Equal(ls.Msg.GetEntries()[0].GetMetadata(), want) {
		t.Fatalf("listdir %v", ls.Msg.GetEntries())
	}
	// A symlink reports its target's metadata.
	link := filepath.Join(dir, "link")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if got := statMeta(t, e, link); !maps.Equal(got, want) {
		t.Fatalf("symlink metadata %v", got)
	}
	// chmod changes ctime but not the file: metadata stays.
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := statMeta(t, e, p); !maps.Equal(got, want) {
		t.Fatalf("metadata after chmod %v", got)
	}
	// A file the user cannot read shows none (as getxattr would fail).
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := statMeta(t, e, p); len(got) != 0 {
		t.Fatalf("unreadable file shows metadata %v", got)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}

	// Move (RPC) keeps it and records the new path.
	sub := filepath.Join(dir, "sub")
	moved := filepath.Join(sub, "b.txt")
	if _, err := e.client.Move(ctx, asUser(testUser, &filesystempb.MoveRequest{Source: p, Destination: moved})); err != nil {
		t.Fatal(err)
	}
	if got := statMeta(t, e, moved); !maps.Equal(got, want) {
		t.Fatalf("metadata after move %v", got)
	}
	raw, err := os.ReadFile(filepath.Join(store.Dir(), storeFiles(t, store)[0]))
	if err != nil {
		t.Fatal(err)
	}
	var ent metaEntry
	if err := json.Unmarshal(raw, &ent); err != nil || ent.Path != moved || !maps.Equal(ent.Metadata, want) {
		t.Fatalf("entry on disk %s (%v)", raw, err)
	}
	// A rename by another process keeps it too (same inode, same mtime).
	renamed := filepath.Join(sub, "c.txt")
	if err := os.Rename(moved, renamed); err != nil {
		t.Fatal(err)
	}
	if got := statMeta(t, e, renamed); !maps.Equal(got, want) {
		t.Fatalf("metadata after external rename %v", got)
	}

	// A restarted agent (fresh store on the same directory, first loaded
	// from inside a RunAs callback) still sees it.
	e.svc.names.meta = NewMetadataStore(store.Dir(), WithoutXattrs())
	if got := statMeta(t, e, renamed); !maps.Equal(got, want) {
		t.Fatalf("reloaded store: %v", got)
	}
	e.svc.names.meta = store

	// Remove (RPC) of the file drops the entry.
	if _, err := e.client.Remove(ctx, asUser(testUser, &filesystempb.RemoveRequest{Path: renamed})); err != nil {
		t.Fatal(err)
	}
	if got := storeFiles(t, store); len(got) != 0 {
		t.Fatalf("entry left after remove: %v", got)
	}

	// Removing a directory drops the entries of the files inside it.
	inner := filepath.Join(sub, "deep", "x.txt")
	if err := os.Mkdir(filepath.Dir(inner), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(inner), 0o777); err != nil {
		t.Fatal(err)
	}
	remember(t, store, inner, "x", map[string]string{"k": "v"})
	outside := filepath.Join(dir, "keep.txt")
	remember(t, store, outside, "y", map[string]string{"k": "w"})
	if got := storeFiles(t, store); len(got) != 2 {
		t.Fatalf("store files %v", got)
	}
	if _, err := e.client.Remove(ctx, asUser(testUser, &filesystempb.RemoveRequest{Path: sub})); err != nil {
		t.Fatal(err)
	}
	if got := storeFiles(t, store); len(got) != 1 {
		t.Fatalf("store files after removing the directory: %v", got)
	}
	if got := statMeta(t, e, outside); got["k"] != "w" {
		t.Fatalf("unrelated entry lost: %v", got)
	}
}

func TestMetadataFallbackWatchEntry(t *testing.T) {
	store := NewMetadataStore(filepath.Join(t.TempDir(), "meta"), WithoutXattrs())
	dir := t.TempDir()
	w, err := newTestWatch(dir, store)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	p := filepath.Join(dir, "w.txt")
	remember(t, store, p, "data", map[string]string{"a": "1"})
	if err := os.Chmod(p, 0o600); err != nil { // a CHMOD event carries the entry
		t.Fatal(err)
	}
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ev := <-w.w.Events:
			for _, fe := range w.translate(ev) {
				if fe.GetType() == filesystempb.EventType_EVENT_TYPE_CHMOD && fe.GetName() == "w.txt" {
					if got := fe.GetEntry().GetMetadata(); got["a"] != "1" || len(got) != 1 {
						t.Fatalf("watch entry metadata %v", got)
					}
					return
				}
			}
		case <-deadline:
			t.Fatal("no chmod event")
		}
	}
}

func newTestWatch(dir string, store *MetadataStore) (*dirWatch, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	d := &dirWatch{root: dir, includeEntry: true, w: w, names: &names{meta: store}}
	if err := d.add(dir); err != nil {
		_ = w.Close()
		return nil, err
	}
	return d, nil
}

// TestMetadataFallbackInodeReuse simulates an unrelated file that got the
// inode of a deleted file with metadata (as on gVisor, without birth times):
// it must not inherit the metadata, and the stale entry is pruned.
func TestMetadataFallbackInodeReuse(t *testing.T) {
	store := NewMetadataStore(filepath.Join(t.TempDir(), "meta"), WithoutXattrs())
	store.noBtime = true
	dir := t.TempDir()
	old := filepath.Join(dir, "old.txt")
	remember(t, store, old, "old content", map[string]string{"secret": "1"})
	oldInfo, err := os.Stat(old)
	if err != nil {
		t.Fatal(err)
	}
	// Deleted by another process (no Remove RPC): the entry stays for now.
	if err := os.Remove(old); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // distinct timestamps even on coarse clocks
	fresh := filepath.Join(dir, "new.txt")
	writeFile(t, fresh, "new")
	freshInfo, err := os.Stat(fresh)
	if err != nil {
		t.Fatal(err)
	}
	oldID, _ := statID(oldInfo)
	freshID, _ := statID(freshInfo)
	// Pretend the kernel reused the inode: move the entry to fresh's key.
	store.mu.Lock()
	e := store.entries[oldID.key]
	if e == nil {
		store.mu.Unlock()
		t.Fatal("entry missing")
	}
	delete(store.entries, oldID.key)
	_ = os.Remove(filepath.Join(store.dir, oldID.key.fileName()))
	e.Dev, e.Ino = freshID.key.dev, freshID.key.ino
	if err := store.persist(e); err != nil {
		store.mu.Unlock()
		t.Fatal(err)
	}
	store.entries[e.key()] = e
	store.mu.Unlock()

	if got, err := store.Read(fresh); err != nil || len(got) != 0 {
		t.Fatalf("reused inode inherited metadata %v (%v)", got, err)
	}
	if got := storeFiles(t, store); len(got) != 0 {
		t.Fatalf("stale entry not pruned: %v", got)
	}
	// Uploading without metadata onto a reused inode also clears an entry.
	remember(t, store, fresh, "v2", map[string]string{"x": "y"})
	f, err := os.Open(fresh)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := store.Remember(f, fresh, nil); err != nil {
		t.Fatal(err)
	}
	if got := storeFiles(t, store); len(got) != 0 {
		t.Fatalf("empty Remember left %v", got)
	}
}

func TestMetadataEntryMatches(t *testing.T) {
	base := metaEntry{Size: 5, MtimeNs: 100, CtimeNs: 100}
	withBirth := base
	withBirth.BtimeNs = 50
	cases := []struct {
		name string
		e    metaEntry
		id   fileID
		want bool
	}{
		{"unchanged", base, fileID{size: 5, mtime: 100, ctime: 100}, true},
		{"renamed or chmod", base, fileID{size: 5, mtime: 100, ctime: 200}, true},
		{"rewritten or reused", base, fileID{size: 5, mtime: 200, ctime: 200}, false},
		{"other size", base, fileID{size: 6, mtime: 100, ctime: 200}, false},
		{"birth time equal, modified", withBirth, fileID{size: 9, mtime: 300, ctime: 300, btime: 50}, true},
		{"birth time differs", withBirth, fileID{size: 5, mtime: 100, ctime: 100, btime: 60}, false},
		{"no birth time now", withBirth, fileID{size: 5, mtime: 100, ctime: 300}, true},
	}
	for _, c := range cases {
		if got := c.e.matches(c.id); got != c.want {
			t.Errorf("%s: matches = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestMetadataStoreCorruptEntry: unreadable or misnamed entries are
// discarded on load instead of failing every read.
func TestMetadataStoreCorruptEntry(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "meta")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"1-2.json": "{not json", "5-6.json": `{"dev":1,"ino":1}`, ".tmp-123": "x"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	store := NewMetadataStore(dir, WithoutXattrs())
	f := filepath.Join(t.TempDir(), "f")
	writeFile(t, f, "x")
	if got, err := store.Read(f); err != nil || len(got) != 0 {
		t.Fatalf("read %v %v", got, err)
	}
	if got := storeFiles(t, store); len(got) != 0 {
		t.Fatalf("corrupt entries kept: %v", got)
	}
	if !strings.HasSuffix(fileKey{dev: 10, ino: 255}.fileName(), "a-ff.json") {
		t.Fatal("entry file name")
	}
}
