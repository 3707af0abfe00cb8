package artifactgc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
	"github.com/airlock-sandbox/airlock/internal/artifacts/s3test"
)

const grace = time.Hour

// fakeRefs is a database: template hashes, paused sandboxes (id → extra)
// and snapshot ids.
type fakeRefs struct {
	templates []string
	sandboxes map[string]string
	snapshots []string
	agents    []string
	err       error
	calls     atomic.Int32
}

func (f *fakeRefs) TemplateHashes(context.Context) ([]string, error) {
	f.calls.Add(1)
	return f.templates, f.err
}

func (f *fakeRefs) PausedSandboxes(context.Context) (map[string]string, error) {
	return f.sandboxes, f.err
}

func (f *fakeRefs) SnapshotIDs(context.Context) ([]string, error) { return f.snapshots, f.err }

func (f *fakeRefs) AgentBlobs(context.Context) ([]string, error) { return f.agents, f.err }

// freeLock is a lock nobody else holds; it counts its releases.
type freeLock struct{ taken, released atomic.Int32 }

func (l *freeLock) lock(context.Context) (func(), bool, error) {
	l.taken.Add(1)
	return func() { l.released.Add(1) }, true, nil
}

// hookBackend wraps a backend: deletes of the keys in failDelete fail, and
// onList runs before each List.
type hookBackend struct {
	artifacts.Backend
	failDelete map[string]bool
	onList     func(prefix string)
}

func (h *hookBackend) Delete(ctx context.Context, key string) error {
	if h.failDelete[key] {
		return errors.New("injected delete failure")
	}
	return h.Backend.Delete(ctx, key)
}

func (h *hookBackend) List(ctx context.Context, prefix string) ([]artifacts.Info, error) {
	if h.onList != nil {
		h.onList(prefix)
	}
	return h.Backend.List(ctx, prefix)
}

// backend is one backend under test.
type backend struct {
	name string
	// open makes an empty store; root is its directory ("" on S3).
	open func(t *testing.T) (b artifacts.Backend, root string)
}

func backends() []backend {
	return []backend{
		{"local", func(t *testing.T) (artifacts.Backend, string) {
			root := filepath.Join(t.TempDir(), "store")
			b, err := artifacts.NewLocal(root)
			if err != nil {
				t.Fatal(err)
			}
			return b, root
		}},
		{"s3", func(t *testing.T) (artifacts.Backend, string) {
			srv := sharedS3(t)
			b, err := artifacts.NewS3(artifacts.S3Config{
				Endpoint: "http://" + srv.Endpoint, Bucket: srv.Bucket, Region: srv.Region,
				// One prefix per run: -count=N reuses the server.
				Prefix:    fmt.Sprintf("t/%s-%d", strings.NewReplacer("/", "-", "#", "-").Replace(t.Name()), s3Runs.Add(1)),
				AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, MaxRetries: 1,
			})
			if err != nil {
				t.Fatal(err)
			}
			return b, ""
		}},
	}
}

var s3Runs atomic.Int64

func sharedS3(t *testing.T) *s3test.Server { return s3test.Shared(t) }

func TestMain(m *testing.M) { os.Exit(s3test.RunMain(m)) }

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// fixture is a store under test with helpers that write what nodes write.
type fixture struct {
	t    *testing.T
	st   *artifacts.Store
	hook *hookBackend
	root string // the local store's directory
	ctx  context.Context
}

func newFixture(t *testing.T, b backend) *fixture {
	inner, root := b.open(t)
	h := &hookBackend{Backend: inner, failDelete: map[string]bool{}}
	st, err := artifacts.NewStore(h, filepath.Join(t.TempDir(), "cache"), testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &fixture{t: t, st: st, hook: h, root: root, ctx: ctx}
}

// tree stores a directory holding one file with content and returns the
// tree's key.
func (f *fixture) tree(content string) string {
	dir := f.t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
	info, err := f.st.PutDir(f.ctx, dir)
	if err != nil {
		f.t.Fatal(err)
	}
	return info.Key
}

func (f *fixture) put(key string, b []byte) {
	if _, err := f.st.Put(f.ctx, key, bytes.NewReader(b), int64(len(b)), artifacts.DigestOf(b)); err != nil {
		f.t.Fatal(err)
	}
}

func digestOfKey(key string) artifacts.Digest {
	d, _ := artifacts.KeyDigest(key)
	return d
}

// template writes templates/<hash> naming treeKey, as template.push does.
func (f *fixture) template(hash, treeKey string) string {
	b, _ := json.Marshal(map[string]any{"version": 1, "hash": hash, "rootfs": digestOfKey(treeKey), "packedBytes": 1, "meta": map[string]any{"name": hash}})
	f.put("templates/"+hash, b)
	return "templates/" + hash
}

// image writes key (paused/<id> or snapshots/<id>) naming treeKey, as
// artifactImages.Put does.
func (f *fixture) image(key, treeKey string) string {
	b, _ := json.Marshal(map[string]any{"version": 1, "tree": digestOfKey(treeKey), "packedBytes": 1})
	f.put(key, b)
	return key
}

// keys lists the store.
func (f *fixture) keys() []string {
	infos, err := f.st.List(f.ctx, "")
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, i := range infos {
		out = append(out, i.Key)
	}
	return out
}

// expect checks which of the keys are still there.
func (f *fixture) expect(kept, gone []string) {
	f.t.Helper()
	have := f.keys()
	for _, k := range kept {
		if !slices.Contains(have, k) {
			f.t.Errorf("%s was deleted; want it kept", k)
		}
	}
	for _, k := range gone {
		if slices.Contains(have, k) {
			f.t.Errorf("%s was kept; want it deleted", k)
		}
	}
}

// opts are Options over f with the clock at now.
func (f *fixture) opts(refs Refs, now time.Time) Options {
	l := &freeLock{}
	return Options{Store: f.st, Refs: refs, Lock: l.lock, Grace: grace, Now: func() time.Time { return now }, Log: testLog(f.t)}
}

// later is a clock at which everything stored so far is older than grace.
func later() time.Time { return time.Now().Add(grace + time.Minute) }

func extra(image string) string {
	b, _ := json.Marshal(map[string]any{"autoResume": true, "image": image})
	return string(b)
}

// TestCollect: referenced objects are kept, unreferenced old ones deleted
// (manifests, then the trees only they named), young ones kept, and a tree
// two manifests name stays while one of them does.
func TestCollect(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			f := newFixture(t, b)
			// Old objects.
			tA, tB, tShared, tP1, tP2, tP3, tP4, tP5, tS2, tOld := f.tree("a"), f.tree("b"), f.tree("shared"),
				f.tree("p1"), f.tree("p2"), f.tree("p3"), f.tree("p4"), f.tree("p5"), f.tree("s2"), f.tree("old, named by a young manifest")
			mA := f.template("hashA", tA)              // row: kept
			mB := f.template("hashB", tB)              // no row: deleted, with tB
			mC := f.template("hashC", tShared)         // no row: deleted; tShared stays for s1
			s1 := f.image("snapshots/s1", tShared)     // row: kept
			s2 := f.image("snapshots/s2", tS2)         // no row: deleted
			p1 := f.image("paused/p1/n1", tP1)         // paused, image paused/p1/n1 (a key per pause): kept
			p2 := f.image("paused/p2", tP2)            // no row: deleted
			p3 := f.image("paused/p3", tP3)            // row running (not listed): deleted
			p4 := f.image("paused/p4", tP4)            // row names another image: deleted
			p5 := f.image("paused/p5", tP5)            // row resuming (listed): kept
			f.put("check-0123abcd", []byte("check\n")) // a crashed start-up check
			blob := artifacts.BlobKey(artifacts.DigestOf([]byte("stray")))
			f.put(blob, []byte("stray")) // named by no manifest: deleted
			// The clock divides old from young; S3 dates have second resolution.
			time.Sleep(1100 * time.Millisecond)
			mark := time.Now()
			time.Sleep(1100 * time.Millisecond)
			tY := f.tree("young")
			mY := f.template("hashY", tY)     // no row yet (a build in progress): kept
			mY2 := f.template("hashY2", tOld) // young, names an old tree: both kept
			f.put("check-young", []byte("check\n"))

			refs := &fakeRefs{
				templates: []string{"hashA", "unpushed"},
				sandboxes: map[string]string{"p1": extra("paused/p1/n1"), "p4": extra("paused/other"), "p5": extra("paused/p5")},
				snapshots: []string{"s1", "s-without-objects"},
			}
			rep, err := Collect(f.ctx, f.opts(refs, mark.Add(grace)))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("report: %+v", rep)
			f.expect([]string{mA, tA, s1, tShared, p1, tP1, p5, tP5, mY, tY, mY2, tOld, "check-young"},
				[]string{mB, tB, mC, s2, tS2, p2, tP2, p3, tP3, p4, tP4, "check-0123abcd", blob})
			want := map[string][2]int{ // kind: kept, deleted
				"templates": {3, 2}, "paused": {2, 3}, "snapshots": {1, 1}, "checks": {1, 1}, "trees": {6, 5}, "blobs": {0, 1},
			}
			for _, k := range rep.kinds() {
				w := want[k.name]
				if k.c.Kept != w[0] || k.c.Deleted != w[1] || k.c.Failed != 0 {
					t.Errorf("%s: %+v, want kept %d, deleted %d", k.name, *k.c, w[0], w[1])
				}
				if (k.c.Deleted > 0) != (k.c.FreedBytes > 0) {
					t.Errorf("%s: %d deleted, %d bytes freed", k.name, k.c.Deleted, k.c.FreedBytes)
				}
			}
			if rep.Skipped || rep.TreesHeld != "" || rep.Unknown != 0 {
				t.Errorf("report %+v", rep)
			}

			// The next pass, once the shared tree's last manifest is gone,
			// deletes it.
			refs.snapshots = nil
			if _, err := Collect(f.ctx, f.opts(refs, mark.Add(grace))); err != nil {
				t.Fatal(err)
			}
			f.expect([]string{mA, tA}, []string{s1, tShared})
		})
	}
}

// TestBlobs: blobs no manifest names are collected like trees.
func TestBlobs(t *testing.T) {
	f := newFixture(t, backends()[0])
	data := []byte("a file")
	info, err := f.st.Put(f.ctx, artifacts.BlobKey(artifacts.DigestOf(data)), bytes.NewReader(data), int64(len(data)), artifacts.DigestOf(data))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Collect(f.ctx, f.opts(&fakeRefs{}, later()))
	if err != nil {
		t.Fatal(err)
	}
	f.expect(nil, []string{info.Key})
	if rep.Blobs != (Count{Deleted: 1, FreedBytes: int64(len(data))}) {
		t.Errorf("blobs %+v", rep.Blobs)
	}
}

// TestAgentBlobsNamedByRowsAreKept: an agent build a paused sandbox's or a
// snapshot's row records (its "agentBlob") is named by no manifest, yet a
// node that resumes the image without that build fetches it: it stays past
// the grace period; an old blob no row records goes; a recorded value that
// is no digest keeps every blob.
func TestAgentBlobsNamedByRowsAreKept(t *testing.T) {
	f := newFixture(t, backends()[0])
	put := func(data string) (artifacts.Digest, string) {
		d := artifacts.DigestOf([]byte(data))
		info, err := f.st.Put(f.ctx, artifacts.BlobKey(d), strings.NewReader(data), int64(len(data)), d)
		if err != nil {
			t.Fatal(err)
		}
		return d, info.Key
	}
	kept, keptKey := put("agent build 1")
	_, goneKey := put("agent build 2")
	if _, err := Collect(f.ctx, f.opts(&fakeRefs{agents: []string{string(kept)}}, later())); err != nil {
		t.Fatal(err)
	}
	f.expect([]string{keptKey}, []string{goneKey})

	_, otherKey := put("agent build 3")
	rep, err := Collect(f.ctx, f.opts(&fakeRefs{agents: []string{"not a digest"}}, later()))
	if err != nil {
		t.Fatal(err)
	}
	if rep.TreesHeld == "" {
		t.Errorf("a recorded value that is no digest did not hold the blobs: %+v", rep)
	}
	f.expect([]string{keptKey, otherKey}, nil)
}

// TestUnreadableManifestHoldsTrees: a manifest that cannot be read names
// an unknown tree, so no tree is deleted in that pass (manifests are).
func TestUnreadableManifestHoldsTrees(t *testing.T) {
	for _, bad := range []struct{ name, body string }{
		{"not json", "{garbage"},
		{"newer version", `{"version":2,"layers":["sha256:` + strings.Repeat("0", 64) + `"]}`},
		{"no tree", `{"version":1}`},
	} {
		t.Run(bad.name, func(t *testing.T) {
			f := newFixture(t, backends()[0])
			orphan, tB := f.tree("orphan"), f.tree("b")
			f.put("snapshots/s1", []byte(bad.body)) // referenced: kept, unreadable
			mB := f.template("hashB", tB)           // unreferenced: deleted
			rep, err := Collect(f.ctx, f.opts(&fakeRefs{snapshots: []string{"s1"}}, later()))
			if err != nil {
				t.Fatal(err)
			}
			f.expect([]string{"snapshots/s1", orphan, tB}, []string{mB})
			if !strings.Contains(rep.TreesHeld, "manifest snapshots/s1") || rep.Trees.Kept != 2 || rep.Trees.Deleted != 0 {
				t.Errorf("report %+v", rep)
			}
		})
	}
}

// TestUnknownKeysAreLeftAlone: a key of no known kind is not deleted, and
// holds the trees back (it may be a newer version's manifest).
func TestUnknownKeysAreLeftAlone(t *testing.T) {
	f := newFixture(t, backends()[0])
	orphan := f.tree("orphan")
	for _, k := range []string{"layers/x", "templates/a/b", "notes.txt"} {
		f.put(k, []byte("x"))
	}
	rep, err := Collect(f.ctx, f.opts(&fakeRefs{}, later()))
	if err != nil {
		t.Fatal(err)
	}
	f.expect([]string{"layers/x", "templates/a/b", "notes.txt", orphan}, nil)
	if rep.Unknown != 3 || !strings.Contains(rep.TreesHeld, "unknown key") {
		t.Errorf("report %+v", rep)
	}
}

// TestLockNotHeld: another instance collects; this one does nothing.
func TestLockNotHeld(t *testing.T) {
	f := newFixture(t, backends()[0])
	orphan := f.tree("orphan")
	refs := &fakeRefs{}
	o := f.opts(refs, later())
	o.Lock = func(context.Context) (func(), bool, error) { return nil, false, nil }
	rep, err := Collect(f.ctx, o)
	if err != nil || !rep.Skipped {
		t.Fatalf("Collect = %+v, %v; want skipped", rep, err)
	}
	if refs.calls.Load() != 0 {
		t.Error("the database was read without the lock")
	}
	f.expect([]string{orphan}, nil)

	o.Lock = func(context.Context) (func(), bool, error) { return nil, false, errors.New("db down") }
	if _, err := Collect(f.ctx, o); err == nil || !strings.Contains(err.Error(), "taking the lock: db down") {
		t.Errorf("Collect with a failing lock: %v", err)
	}
}

// TestReadFailuresAbort: the database or the store failing to answer ends
// the pass with an error before anything is deleted; the lock is released.
func TestReadFailuresAbort(t *testing.T) {
	f := newFixture(t, backends()[0])
	orphan := f.tree("orphan")
	l := &freeLock{}
	o := f.opts(&fakeRefs{err: errors.New("connection refused")}, later())
	o.Lock = l.lock
	if _, err := Collect(f.ctx, o); err == nil || !strings.Contains(err.Error(), "reading the template rows: connection refused") {
		t.Errorf("Collect with a failing database: %v", err)
	}
	o.Refs = &fakeRefs{}
	root := f.root
	if err := os.Rename(root, root+".away"); err != nil {
		t.Fatal(err)
	}
	_, err := Collect(f.ctx, o)
	if err == nil || !errors.Is(err, artifacts.ErrUnavailable) || !strings.Contains(err.Error(), "listing the store") {
		t.Errorf("Collect with the store gone: %v", err)
	}
	if err := os.Rename(root+".away", root); err != nil {
		t.Fatal(err)
	}
	f.expect([]string{orphan}, nil)
	if l.taken.Load() != 2 || l.released.Load() != 2 {
		t.Errorf("lock taken %d, released %d times", l.taken.Load(), l.released.Load())
	}
}

// TestFailedDeleteKeepsItsTree: deletes are best effort; a manifest that
// could not be deleted remains, so its tree does too.
func TestFailedDeleteKeepsItsTree(t *testing.T) {
	f := newFixture(t, backends()[0])
	tA, tB := f.tree("a"), f.tree("b")
	mA, mB := f.template("hashA", tA), f.template("hashB", tB)
	f.hook.failDelete[mA] = true
	rep, err := Collect(f.ctx, f.opts(&fakeRefs{}, later()))
	if err != nil {
		t.Fatal(err)
	}
	f.expect([]string{mA, tA}, []string{mB, tB})
	if rep.Templates != (Count{Deleted: 1, Failed: 1, FreedBytes: rep.Templates.FreedBytes}) || rep.Trees.Kept != 1 || rep.Trees.Deleted != 1 {
		t.Errorf("report %+v", rep)
	}
}

// TestManifestWrittenDuringThePass: a build whose tree was already stored
// (PutDir does not upload it again) writes its manifest while a pass runs;
// the manifests are listed again before trees go, so the tree stays.
func TestManifestWrittenDuringThePass(t *testing.T) {
	f := newFixture(t, backends()[0])
	reused := f.tree("a rebuilt template's bytes")
	wrote := false
	f.hook.onList = func(prefix string) {
		if prefix == "templates/" && !wrote {
			wrote = true
			f.template("rebuilt", reused)
		}
	}
	if _, err := Collect(f.ctx, f.opts(&fakeRefs{}, later())); err != nil {
		t.Fatal(err)
	}
	if !wrote {
		t.Fatal("the manifests were not listed again")
	}
	f.expect([]string{"templates/rebuilt", reused}, nil)
}

// TestRun: passes repeat every Interval after FirstDelay, each under the
// lock, until the context ends.
func TestRun(t *testing.T) {
	f := newFixture(t, backends()[0])
	l := &freeLock{}
	o := f.opts(&fakeRefs{}, later())
	o.Lock, o.FirstDelay, o.Interval = l.lock, 10*time.Millisecond, 20*time.Millisecond
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	deadline := time.Now().Add(10 * time.Second)
	for l.released.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := l.released.Load(); n < 3 || l.taken.Load() != n {
		t.Errorf("%d passes taken, %d released; want at least 3, all released", l.taken.Load(), n)
	}
	if err := Run(ctx, Options{}); err == nil {
		t.Error("Run without a store ran")
	}
}

func TestClassify(t *testing.T) {
	hex := strings.Repeat("0a", 32)
	for key, want := range map[string]kind{
		"templates/abc": kindTemplate, "paused/sbx1": kindPaused, "snapshots/snap-1": kindSnapshot,
		"check-00ff": kindCheck, "trees/sha256/" + hex: kindTree, "blobs/sha256/" + hex: kindBlob,
		"trees/sha256/abc": kindUnknown, "templates/a/b": kindUnknown, "templates": kindUnknown,
		"other/x": kindUnknown, "check": kindUnknown, "trees/md5/" + hex: kindUnknown,
		"paused/sbx1/0a1b2c": kindPaused, "paused/sbx1/a/b": kindUnknown, "paused//x": kindUnknown,
	} {
		if got, _ := classify(key); got != want {
			t.Errorf("classify(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestNamesImage(t *testing.T) {
	for _, c := range []struct {
		extra string
		want  bool
	}{
		{"", false}, {`{"autoResume":true}`, false}, {`{"image":"paused/x"}`, true},
		{`{"image":"paused/y"}`, false}, {"{not json", true},
	} {
		if got := namesImage(c.extra, "paused/x"); got != c.want {
			t.Errorf("namesImage(%q) = %v, want %v", c.extra, got, c.want)
		}
	}
}

func TestReportLogValue(t *testing.T) {
	var buf bytes.Buffer
	r := Report{Trees: Count{Kept: 1, Deleted: 2, FreedBytes: 30}, TreesHeld: "x", Duration: time.Second}
	slog.New(slog.NewTextHandler(&buf, nil)).Info("pass", "report", r)
	got := buf.String()
	for _, want := range []string{"report.trees.kept=1", "report.trees.deleted=2", "report.trees.freed_bytes=30", "report.trees_held=x", "report.duration=1s"} {
		if !strings.Contains(got, want) {
			t.Errorf("log %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "templates") {
		t.Errorf("log %q shows empty kinds", got)
	}
	if r.Deleted() != 2 || r.Freed() != 30 {
		t.Errorf("Deleted %d, Freed %d", r.Deleted(), r.Freed())
	}
}
