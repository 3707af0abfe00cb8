package template

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
	"github.com/airlock-sandbox/airlock/internal/artifacts/s3test"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// countingBackend counts the opens (downloads) of each key.
type countingBackend struct {
	artifacts.Backend
	mu    sync.Mutex
	opens map[string]int
	gate  chan struct{} // when non-nil, opens of trees wait until it is closed
}

func (c *countingBackend) Open(ctx context.Context, key string) (io.ReadCloser, artifacts.Info, error) {
	c.mu.Lock()
	c.opens[key]++
	gate := c.gate
	c.mu.Unlock()
	if gate != nil && strings.HasPrefix(key, "trees/") {
		<-gate
	}
	return c.Backend.Open(ctx, key)
}

func (c *countingBackend) opened(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opens[key]
}

// node is one host of a cluster under test: its own data dir and artifact
// cache, the cluster's shared records and artifact backend.
type node struct {
	m     *Manager
	fb    *fakeBuilder
	dir   string
	store *artifacts.Store
}

func newNode(t *testing.T, st store.Store, b artifacts.Backend) *node {
	t.Helper()
	dir := t.TempDir()
	m := NewManager(dir, st, quietLog())
	fb := &fakeBuilder{}
	m.build = fb.build
	m.SetShared(true)
	n := &node{m: m, fb: fb, dir: dir}
	if b != nil {
		as, err := artifacts.NewStore(b, filepath.Join(dir, "artifacts-cache"), quietLog())
		if err != nil {
			t.Fatal(err)
		}
		m.SetArtifacts(as)
		n.store = as
	}
	return n
}

func newLocalBackend(t *testing.T) (*countingBackend, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "artifacts")
	b, err := artifacts.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	return &countingBackend{Backend: b, opens: map[string]int{}}, root
}

// sameTree fails unless a and b hold the same names, modes, contents and
// hard links (diff plus a check of the fake builder's link).
func sameTree(t *testing.T, a, b string) {
	t.Helper()
	if out, err := exec.Command("diff", "-r", "--no-dereference", a, b).CombinedOutput(); err != nil {
		t.Fatalf("trees differ: %v\n%s", err, out)
	}
	for _, root := range []string{a, b} {
		var st1, st2 syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(root, "etc/hostname"), &st1); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Lstat(filepath.Join(root, "etc/hostname2"), &st2); err != nil {
			t.Fatal(err)
		}
		if st1.Ino != st2.Ino || st1.Mode != st2.Mode {
			t.Fatalf("%s: hard link lost (inodes %d, %d)", root, st1.Ino, st2.Ino)
		}
	}
}

// recordedManifest fetches the manifest of hash with the digest a record
// of hash names.
func recordedManifest(ctx context.Context, m *Manager, hash string) (*manifest, error) {
	rec, err := m.byHash(ctx, hash)
	if err != nil {
		return nil, err
	}
	man, _, err := m.readManifest(ctx, hash, artifacts.Digest(rec.ArtifactDigest))
	return man, err
}

func noCachedTrees(t *testing.T, n *node) {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(n.store.CacheDir(), "trees"))
	if len(ents) != 0 {
		t.Errorf("%d trees left in the artifact cache (a pulled tree is moved out)", len(ents))
	}
	ents, _ = os.ReadDir(n.store.CacheDir())
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("leftover %s in the artifact cache", e.Name())
		}
	}
}

// A template built on node A (a built-in recipe) and one recorded by a
// Dockerfile build (Register) are pulled by node B on first use, checked and
// installed as ordinary template directories; B's Ensure of the recipe pulls
// instead of building; GC on B keeps them.
func TestArtifactsPushPull(t *testing.T) {
	ctx := context.Background()
	st := newFakeStore()
	b, _ := newLocalBackend(t)
	a, bn := newNode(t, st, b), newNode(t, st, b)
	var pulled atomic.Int32
	bn.m.OnPull(func() { pulled.Add(1) })

	base, err := a.m.Build(ctx, "base", BuildOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := a.store.Exists(ctx, ManifestKey(base.Hash)); err != nil || !ok {
		t.Fatalf("manifest of base after the build: %v %v", ok, err)
	}
	h := strings.Repeat("b", 64)
	fakeLayer(t, a.m, h)
	if err := os.WriteFile(filepath.Join(a.dir, "templates", h, rootfsDir, "etc/app"), []byte("app\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := `{"kind":"dockerfile","from":"base","layers":["` + base.Hash + `","` + h + `"]}`
	if _, err := a.m.Register(ctx, "app", h, spec); err != nil {
		t.Fatal(err)
	}

	// B: nothing on disk yet.
	if _, ok := bn.m.LayerPath(base.Hash); ok {
		t.Fatal("base on B before any pull")
	}
	got, err := bn.m.Get(ctx, "base")
	if err != nil {
		t.Fatalf("Get on B: %v", err)
	}
	if got.Hash != base.Hash || got.RootFS != filepath.Join(bn.dir, "templates", base.Hash, rootfsDir) {
		t.Fatalf("Get on B = %+v", got)
	}
	sameTree(t, base.RootFS, got.RootFS)
	ma, _ := os.ReadFile(filepath.Join(a.dir, "templates", base.Hash, metaFile))
	mb, _ := os.ReadFile(filepath.Join(bn.dir, "templates", base.Hash, metaFile))
	if strings.TrimSpace(string(ma)) == "" || !strings.Contains(string(mb), `"hash":"`+base.Hash+`"`) {
		t.Fatalf("meta.json on B:\n%s\non A:\n%s", mb, ma)
	}
	if _, err := bn.m.readMeta(base.Hash); err != nil {
		t.Fatal(err)
	}
	app, err := bn.m.Get(ctx, "app")
	if err != nil {
		t.Fatalf("Get app on B: %v", err)
	}
	if app.Spec != spec {
		t.Fatalf("spec %q", app.Spec)
	}
	if b, err := os.ReadFile(filepath.Join(app.RootFS, "etc/app")); err != nil || string(b) != "app\n" {
		t.Fatalf("etc/app on B: %q %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(app.RootFS, "etc/app")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("etc/app mode on B: %v %v", fi, err)
	}
	noCachedTrees(t, bn)
	noTmpLeft(t, bn.dir)
	if n := pulled.Load(); n != 2 {
		t.Errorf("OnPull called %d times, want 2", n)
	}

	// B's Ensure finds the pulled base: no build on B.
	if _, err := bn.m.Ensure(ctx, "base", nil); err != nil {
		t.Fatal(err)
	}
	if n := bn.fb.calls.Load(); n != 0 {
		t.Fatalf("B built %d times", n)
	}
	list, err := bn.m.List(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("List on B: %d %v", len(list), err)
	}
	// Pulled templates are ordinary template directories: GC keeps the
	// recorded ones, and removes one whose record is gone.
	if removed, _, err := bn.m.GC(ctx, nil); err != nil || len(removed) != 0 {
		t.Fatalf("GC on B: removed %v err %v", removed, err)
	}
	if err := bn.m.Remove(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if removed, _, err := bn.m.GC(ctx, nil); err != nil || len(removed) != 1 || removed[0] != h {
		t.Fatalf("GC on B after removing app: removed %v err %v", removed, err)
	}
}

// A node that starts after another built and recorded the recipe pulls it
// in Ensure instead of building. Only a record says what the store's copy
// must be (its artifact digest): with the record gone, the store's
// manifest alone is not trusted, and the node builds (security review M4).
func TestArtifactsEnsurePullsInsteadOfBuilding(t *testing.T) {
	ctx := context.Background()
	st := newFakeStore()
	b, _ := newLocalBackend(t)
	a, c, d := newNode(t, st, b), newNode(t, st, b), newNode(t, st, b)
	// No record yet, nothing in the store: A builds and pushes.
	if _, err := a.m.Ensure(ctx, "base", nil); err != nil {
		t.Fatal(err)
	}
	if a.fb.calls.Load() != 1 {
		t.Fatalf("A built %d times", a.fb.calls.Load())
	}
	tpl, err := c.m.Ensure(ctx, "base", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.fb.calls.Load() != 0 {
		t.Fatalf("C built %d times", c.fb.calls.Load())
	}
	if _, ok := c.m.LayerPath(tpl.Hash); !ok {
		t.Fatal("not installed on C")
	}
	// The record is dropped (another version's record, say): D does not
	// take the store's manifest on its own word; it builds, and records.
	if err := st.DeleteTemplate(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.m.Ensure(ctx, "base", nil); err != nil {
		t.Fatal(err)
	}
	if d.fb.calls.Load() != 1 {
		t.Fatalf("D built %d times, want 1 (no record names the store's copy)", d.fb.calls.Load())
	}
	if rec, err := st.GetTemplate(ctx, "base"); err != nil || rec.ArtifactDigest == "" {
		t.Fatalf("D's record of base: %+v, %v", rec, err)
	}
}

// A tree object whose bytes were changed in the store is refused (not
// installed, not reported as a missing template), removed from the store,
// and pushed again by the next record of the template on its builder.
func TestArtifactsCorruptTreeRefused(t *testing.T) {
	ctx := context.Background()
	st := newFakeStore()
	b, root := newLocalBackend(t)
	a, bn := newNode(t, st, b), newNode(t, st, b)
	base, err := a.m.Build(ctx, "base", BuildOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	man, err := recordedManifest(ctx, a.m, base.Hash)
	if err != nil {
		t.Fatal(err)
	}
	obj := filepath.Join(root, filepath.FromSlash(artifacts.TreeKey(man.RootFS)))
	data, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(obj, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = bn.m.Get(ctx, "base")
	if !errors.Is(err, artifacts.ErrDigestMismatch) || errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a corrupted template = %v, want a digest mismatch", err)
	}
	if !strings.Contains(err.Error(), "base") {
		t.Errorf("error does not name the template: %v", err)
	}
	if _, ok := bn.m.LayerPath(base.Hash); ok {
		t.Fatal("a corrupted template was installed")
	}
	noCachedTrees(t, bn)
	noTmpLeft(t, bn.dir)
	if _, err := os.Stat(obj); !os.IsNotExist(err) {
		t.Fatalf("the corrupted object is still in the store: %v", err)
	}
	// The record stays (it is right; the copy was wrong).
	if _, err := st.GetTemplate(ctx, "base"); err != nil {
		t.Fatalf("record: %v", err)
	}
	// Now the store has a manifest without its tree: B says so (not found
	// in the store), and A's next record of base pushes it again.
	if _, err := bn.m.Get(ctx, "base"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get with the tree gone = %v, want ErrNotFound", err)
	}
	if _, err := a.m.Ensure(ctx, "base", nil); err != nil {
		t.Fatal(err)
	}
	got, err := bn.m.Get(ctx, "base")
	if err != nil {
		t.Fatalf("Get after the push again: %v", err)
	}
	sameTree(t, base.RootFS, got.RootFS)
}

// Concurrent Gets of one template on a node share one pull: the tree and
// the manifest are each downloaded once.
func TestArtifactsConcurrentGetsPullOnce(t *testing.T) {
	ctx := context.Background()
	st := newFakeStore()
	b, _ := newLocalBackend(t)
	a, bn := newNode(t, st, b), newNode(t, st, b)
	base, err := a.m.Build(ctx, "base", BuildOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	man, err := recordedManifest(ctx, a.m, base.Hash)
	if err != nil {
		t.Fatal(err)
	}
	treeOpens := b.opened(artifacts.TreeKey(man.RootFS))
	manOpens := b.opened(ManifestKey(base.Hash))
	gate := make(chan struct{})
	b.mu.Lock()
	b.gate = gate
	b.mu.Unlock()
	var wg sync.WaitGroup
	var failed atomic.Int32
	time.AfterFunc(200*time.Millisecond, func() { close(gate) }) // all 16 are waiting by then
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := "base"
			if i%2 == 1 {
				name = base.Hash // by hash, too
			}
			if _, err := bn.m.Get(ctx, name); err != nil {
				t.Error(err)
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}
	if n := b.opened(artifacts.TreeKey(man.RootFS)) - treeOpens; n != 1 {
		t.Errorf("tree downloaded %d times, want 1", n)
	}
	if n := b.opened(ManifestKey(base.Hash)) - manOpens; n != 1 {
		t.Errorf("manifest downloaded %d times, want 1", n)
	}
	noTmpLeft(t, bn.dir)
}

// An unreachable store is an error saying so (not "template not found"),
// and the record stays; once the store is back, the pull works.
func TestArtifactsUnreachable(t *testing.T) {
	ctx := context.Background()
	st := newFakeStore()
	b, root := newLocalBackend(t)
	a, bn := newNode(t, st, b), newNode(t, st, b)
	if _, err := a.m.Build(ctx, "base", BuildOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(root, root+".away"); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := bn.m.Get(cctx, "base")
	if !errors.Is(err, artifacts.ErrUnavailable) || errors.Is(err, ErrNotFound) {
		t.Fatalf("Get with the store away = %v, want ErrUnavailable", err)
	}
	if _, err := st.GetTemplate(ctx, "base"); err != nil {
		t.Fatalf("record: %v", err)
	}
	noTmpLeft(t, bn.dir)
	// A build that cannot push fails and records nothing.
	if _, err := a.m.Build(ctx, "code-interpreter-v1", BuildOptions{}, nil); !errors.Is(err, artifacts.ErrUnavailable) {
		t.Fatalf("build with the store away = %v, want ErrUnavailable", err)
	}
	if _, err := st.GetTemplate(ctx, "code-interpreter-v1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a template that was not pushed was recorded: %v", err)
	}
	if err := os.Rename(root+".away", root); err != nil {
		t.Fatal(err)
	}
	if _, err := bn.m.Get(ctx, "base"); err != nil {
		t.Fatalf("Get once the store is back: %v", err)
	}
}

// Without an artifact store nothing changes: nothing is pushed, another
// node's template is "not on this node" in shared mode, and a single host
// drops a record whose files vanished.
func TestArtifactsNoStore(t *testing.T) {
	ctx := context.Background()
	st := newFakeStore()
	b, root := newLocalBackend(t)
	a := newNode(t, st, nil)
	bn := newNode(t, st, b)
	if _, err := a.m.Build(ctx, "base", BuildOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "templates")); !os.IsNotExist(err) {
		t.Fatalf("a manager without a store wrote to it: %v", err)
	}
	c := newNode(t, st, nil)
	if _, err := c.m.Get(ctx, "base"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "not on this node") {
		t.Fatalf("Get on another node without a store = %v", err)
	}
	// With a store that lacks the template: not found, naming the store.
	_, err := bn.m.Get(ctx, "base")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "artifact store") {
		t.Fatalf("Get with a store that lacks it = %v", err)
	}
	if _, err := st.GetTemplate(ctx, "base"); err != nil {
		t.Fatalf("shared record dropped: %v", err)
	}
	// Single host (not shared), no store: the old behaviour.
	c.m.SetShared(false)
	if _, err := c.m.Get(ctx, "base"); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := st.GetTemplate(ctx, "base"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("stale record kept on a single host: %v", err)
	}
}

// The same push and pull through a real S3 server (versitygw, see
// internal/artifacts/s3test).
func TestArtifactsS3(t *testing.T) {
	srv := s3test.StartT(t)
	b, err := artifacts.NewS3(artifacts.S3Config{
		Endpoint: "http://" + srv.Endpoint, Bucket: srv.Bucket, Prefix: "tpl", Region: srv.Region,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, MaxRetries: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st := newFakeStore()
	a, bn := newNode(t, st, b), newNode(t, st, b)
	base, err := a.m.Build(ctx, "base", BuildOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := bn.m.Get(ctx, "base")
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, base.RootFS, got.RootFS)
	noCachedTrees(t, bn)
}

// A real template directory (AIRLOCK_TEST_TEMPLATE_DIR=<data>/templates/<hash>,
// cloned here with hard links, never changed) pushed by one node and pulled
// by another, through the local backend and the S3 test server; the pulled
// tree packs to the same digest (same names, bytes, owners, modes, times,
// links and xattrs). It logs the timings (internal/artifacts/doc.go "Artifacts").
func TestArtifactsRealTemplate(t *testing.T) {
	src := os.Getenv("AIRLOCK_TEST_TEMPLATE_DIR")
	if src == "" {
		t.Skip("AIRLOCK_TEST_TEMPLATE_DIR not set")
	}
	hash := filepath.Base(src)
	meta, err := os.ReadFile(filepath.Join(src, metaFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, backend := range []string{"local", "s3"} {
		t.Run(backend, func(t *testing.T) {
			var b artifacts.Backend
			if backend == "local" {
				b, _ = newLocalBackend(t)
			} else {
				srv := s3test.StartT(t)
				if b, err = artifacts.NewS3(artifacts.S3Config{
					Endpoint: "http://" + srv.Endpoint, Bucket: srv.Bucket, Region: srv.Region,
					AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
				}); err != nil {
					t.Fatal(err)
				}
			}
			ctx := context.Background()
			st := newFakeStore()
			a, bn := newNode(t, st, b), newNode(t, st, b)
			if err := os.MkdirAll(filepath.Join(a.dir, "templates"), 0o755); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("cp", "-a", "-l", src, filepath.Join(a.dir, "templates", hash)).CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			var tm templateMeta
			if err := json.Unmarshal(meta, &tm); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if _, err := a.m.Register(ctx, tm.Name, hash, tm.Spec); err != nil {
				t.Fatal(err)
			}
			push := time.Since(start)
			start = time.Now()
			got, err := bn.m.Get(ctx, tm.Name)
			if err != nil {
				t.Fatal(err)
			}
			pull := time.Since(start)
			start = time.Now()
			if _, err := bn.m.Get(ctx, tm.Name); err != nil {
				t.Fatal(err)
			}
			again := time.Since(start)
			man, err := recordedManifest(ctx, a.m, hash)
			if err != nil {
				t.Fatal(err)
			}
			start = time.Now()
			if _, err := a.m.Register(ctx, tm.Name+"-tag", hash, tm.Spec); err != nil {
				t.Fatal(err)
			}
			repush := time.Since(start)
			t.Logf("%s: %s, %.1f MiB of files, tree %.1f MiB: push %v, pull %v, Get once pulled %v, record again (already pushed) %v",
				backend, tm.Name, float64(tm.SizeBytes)/(1<<20), float64(man.PackedBytes)/(1<<20), push.Round(time.Millisecond),
				pull.Round(time.Millisecond), again.Round(time.Microsecond), repush.Round(time.Millisecond))
			// The pulled tree packs to the pushed digest.
			info, err := bn.store.PutDir(ctx, got.RootFS)
			if err != nil {
				t.Fatal(err)
			}
			if info.Digest != man.RootFS {
				t.Fatalf("pulled tree packs to %s, pushed %s", info.Digest, man.RootFS)
			}
			noCachedTrees(t, bn)
		})
	}
}

// Templates recorded before the store was given are pushed by PushMissing
// (the daemon runs it once ready), and then pulled by other nodes.
func TestArtifactsPushMissing(t *testing.T) {
	ctx := context.Background()
	st := newFakeStore()
	b, _ := newLocalBackend(t)
	a := newNode(t, st, nil)
	base, err := a.m.Build(ctx, "base", BuildOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.m.Register(ctx, "base-tag", base.Hash, base.Spec); err != nil {
		t.Fatal(err)
	}
	// The same data dir, restarted with the store.
	as, err := artifacts.NewStore(b, filepath.Join(a.dir, "artifacts-cache"), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	a2 := NewManager(a.dir, st, quietLog())
	a2.SetShared(true)
	a2.SetArtifacts(as)
	a2.PushMissing(ctx)
	if ok, err := as.Exists(ctx, ManifestKey(base.Hash)); err != nil || !ok {
		t.Fatalf("manifest after PushMissing: %v %v", ok, err)
	}
	bn := newNode(t, st, b)
	got, err := bn.m.Get(ctx, "base-tag")
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, base.RootFS, got.RootFS)
}

// Two nodes that built one recipe each keep the row's copy: the second
// build finds the store holding the manifest the row names and records
// that digest, uploading nothing (no turns at rewriting the manifest).
func TestArtifactsSecondBuildKeepsRecordedCopy(t *testing.T) {
	ctx := context.Background()
	st := newFakeStore()
	b, _ := newLocalBackend(t)
	a, bn := newNode(t, st, b), newNode(t, st, b)
	if _, err := a.m.Build(ctx, "base", BuildOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	rec, err := st.GetTemplate(ctx, "base")
	if err != nil || rec.ArtifactDigest == "" {
		t.Fatalf("A's record: %+v, %v", rec, err)
	}
	if _, err := bn.m.Build(ctx, "base", BuildOptions{Force: true}, nil); err != nil {
		t.Fatal(err)
	}
	if bn.fb.calls.Load() != 1 {
		t.Fatalf("B built %d times, want 1 (forced)", bn.fb.calls.Load())
	}
	after, err := st.GetTemplate(ctx, "base")
	if err != nil || after.ArtifactDigest != rec.ArtifactDigest {
		t.Fatalf("B's build changed the record's digest: %q, was %q (%v)", after.ArtifactDigest, rec.ArtifactDigest, err)
	}
	info, err := a.store.Stat(ctx, ManifestKey(rec.Hash))
	if err != nil || string(info.Digest) != rec.ArtifactDigest {
		t.Fatalf("the store's manifest after B's build: %s, %v; want %s", info.Digest, err, rec.ArtifactDigest)
	}
}
