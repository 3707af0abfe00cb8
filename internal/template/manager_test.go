package template

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fakeBuilder writes a tiny rootfs and counts its invocations.
type fakeBuilder struct {
	calls   atomic.Int32
	release chan struct{} // when non-nil, builds block until it is closed
	fail    error
}

func (f *fakeBuilder) build(ctx context.Context, r *Recipe, rootfs string, progress func(Progress)) error {
	f.calls.Add(1)
	if progress != nil {
		progress(Progress{Phase: PhaseDownload, Message: "fake", Done: 1, Total: 1})
	}
	if f.release != nil {
		select {
		case <-f.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc/hostname"), []byte("sandbox\n"), 0o644); err != nil {
		return err
	}
	if err := os.Link(filepath.Join(rootfs, "etc/hostname"), filepath.Join(rootfs, "etc/hostname2")); err != nil {
		return err
	}
	return f.fail
}

func newTestManager(t *testing.T) (*Manager, *fakeStore, *fakeBuilder, string) {
	t.Helper()
	dir := t.TempDir()
	st := newFakeStore()
	m := NewManager(dir, st, quietLog())
	fb := &fakeBuilder{}
	m.build = fb.build
	return m, st, fb, dir
}

func noTmpLeft(t *testing.T, dataDir string) {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Join(dataDir, "templates"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("leftover %s", e.Name())
		}
	}
}

func TestBuildGetList(t *testing.T) {
	ctx := context.Background()
	m, st, fb, dir := newTestManager(t)
	r, _ := LookupRecipe("base")

	if _, err := m.Get(ctx, "base"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get before build = %v, want ErrNotFound", err)
	}
	tpl, err := m.Build(ctx, "base", BuildOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Name != "base" || tpl.Hash != r.Hash() {
		t.Fatalf("built %+v", tpl)
	}
	if want := filepath.Join(dir, "templates", r.Hash(), "rootfs"); tpl.RootFS != want {
		t.Fatalf("RootFS = %s, want %s", tpl.RootFS, want)
	}
	if b, err := os.ReadFile(filepath.Join(tpl.RootFS, "etc/hostname")); err != nil || string(b) != "sandbox\n" {
		t.Fatalf("rootfs content: %q %v", b, err)
	}
	if tpl.SizeBytes != int64(len("sandbox\n")) { // hard link counted once
		t.Fatalf("SizeBytes = %d", tpl.SizeBytes)
	}
	if time.Since(tpl.CreatedAt) > time.Minute {
		t.Fatalf("CreatedAt = %v", tpl.CreatedAt)
	}
	rec, err := st.GetTemplate(ctx, "base")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Hash != r.Hash() || rec.Spec != r.SpecJSON() || rec.SizeBytes != tpl.SizeBytes {
		t.Fatalf("record %+v", rec)
	}
	noTmpLeft(t, dir)

	byName, err := m.Get(ctx, "base")
	if err != nil || byName.Hash != tpl.Hash || byName.RootFS != tpl.RootFS {
		t.Fatalf("Get(base) = %+v, %v", byName, err)
	}
	byHash, err := m.Get(ctx, r.Hash())
	if err != nil || byHash.Name != "base" {
		t.Fatalf("Get(hash) = %+v, %v", byHash, err)
	}
	list, err := m.List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "base" {
		t.Fatalf("List = %+v, %v", list, err)
	}

	// Cached: a second Build does not run the builder.
	if _, err := m.Build(ctx, "base", BuildOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	if n := fb.calls.Load(); n != 1 {
		t.Fatalf("builder ran %d times, want 1", n)
	}
	// Force rebuilds and replaces the directory.
	marker := filepath.Join(tpl.RootFS, "marker")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Build(ctx, "base", BuildOptions{Force: true}, nil); err != nil {
		t.Fatal(err)
	}
	if n := fb.calls.Load(); n != 2 {
		t.Fatalf("forced build: builder ran %d times, want 2", n)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("forced build kept old tree: %v", err)
	}
	noTmpLeft(t, dir)

	if _, err := m.Build(ctx, "nope", BuildOptions{}, nil); !errors.Is(err, ErrUnknownRecipe) {
		t.Fatalf("Build(nope) = %v", err)
	}
	if _, err := m.Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(nope) = %v", err)
	}
	if _, err := m.Ensure(ctx, "nope", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Ensure(nope) = %v", err)
	}
}

func TestGetDropsRecordWhenFilesVanish(t *testing.T) {
	ctx := context.Background()
	m, st, _, _ := newTestManager(t)
	tpl, err := m.Ensure(ctx, "base", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Dir(tpl.RootFS)); err != nil {
		t.Fatal(err)
	}
	if l, _ := m.List(ctx); len(l) != 0 {
		t.Fatalf("List shows vanished template: %+v", l)
	}
	if _, err := m.Get(ctx, "base"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get = %v, want ErrNotFound", err)
	}
	if _, err := st.GetTemplate(ctx, "base"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("record not removed: %v", err)
	}
}

func TestEnsureReusesAndRebuilds(t *testing.T) {
	ctx := context.Background()
	m, st, fb, dir := newTestManager(t)
	r, _ := LookupRecipe("base")
	if _, err := m.Ensure(ctx, "base", nil); err != nil {
		t.Fatal(err)
	}
	// A fresh manager and an empty store (e.g. the DB was deleted) find the
	// build on disk by hash: no rebuild.
	st2 := newFakeStore()
	m2 := NewManager(dir, st2, quietLog())
	m2.build = fb.build
	tpl, err := m2.Ensure(ctx, "base", nil)
	if err != nil || tpl.Hash != r.Hash() {
		t.Fatalf("Ensure = %+v, %v", tpl, err)
	}
	if n := fb.calls.Load(); n != 1 {
		t.Fatalf("builder ran %d times, want 1", n)
	}
	if _, err := st2.GetTemplate(ctx, "base"); err != nil {
		t.Fatalf("cached template not recorded: %v", err)
	}
	// A record pointing at an outdated hash whose files vanished triggers a
	// build of the current recipe (here cached on disk, so instant).
	_ = st.PutTemplate(ctx, &store.Template{Name: "base", Hash: "0000", CreatedAt: time.Now()})
	tpl, err = m.Ensure(ctx, "base", nil)
	if err != nil || tpl.Hash != r.Hash() {
		t.Fatalf("Ensure with stale record = %+v, %v", tpl, err)
	}
	if n := fb.calls.Load(); n != 1 {
		t.Fatalf("builder ran %d times, want 1", n)
	}
}

func TestFailedBuildLeavesNothing(t *testing.T) {
	ctx := context.Background()
	m, st, fb, dir := newTestManager(t)
	fb.fail = errors.New("boom")
	if _, err := m.Ensure(ctx, "base", nil); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Ensure = %v, want boom", err)
	}
	noTmpLeft(t, dir)
	r, _ := LookupRecipe("base")
	if _, err := os.Stat(filepath.Join(dir, "templates", r.Hash())); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("half template present: %v", err)
	}
	if _, err := st.GetTemplate(ctx, "base"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("failed build recorded: %v", err)
	}
}

func TestEnsureCoalesced(t *testing.T) {
	ctx := context.Background()
	m, _, fb, _ := newTestManager(t)
	fb.release = make(chan struct{})

	const n = 8
	var wg sync.WaitGroup
	results := make([]*Template, n)
	errs := make([]error, n)
	var progressCalls atomic.Int32
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = m.Ensure(ctx, "base", func(Progress) { progressCalls.Add(1) })
		}()
	}
	// Wait until the build started and every caller joined it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		m.mu.Lock()
		c := m.builds["base"]
		m.mu.Unlock()
		joined := 0
		if c != nil {
			c.mu.Lock()
			joined = c.waiters
			c.mu.Unlock()
		}
		if joined == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d callers joined the build", joined, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(fb.release)
	wg.Wait()
	if c := fb.calls.Load(); c != 1 {
		t.Fatalf("builder ran %d times, want 1", c)
	}
	for i := range n {
		if errs[i] != nil || results[i] == nil || results[i].Hash != results[0].Hash {
			t.Fatalf("caller %d: %+v, %v", i, results[i], errs[i])
		}
	}
	if results[0] == results[1] {
		t.Fatal("callers share one *Template")
	}
	// Progress reached every subscriber that joined before the first report
	// (at least the leader) and at most all of them, twice each (fake + done).
	if pc := progressCalls.Load(); pc < 2 {
		t.Fatalf("progress calls = %d", pc)
	}
}

func TestBuildCancelledOnlyWhenAllWaitersLeave(t *testing.T) {
	m, _, fb, dir := newTestManager(t)
	fb.release = make(chan struct{})

	ctx1, cancel1 := context.WithCancel(context.Background())
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	err1 := make(chan error, 1)
	err2 := make(chan error, 1)
	go func() { _, err := m.Ensure(ctx1, "base", nil); err1 <- err }()
	waitCalls(t, fb, 1)
	go func() { _, err := m.Ensure(ctx2, "base", nil); err2 <- err }()
	waitWaiters(t, m, "base", 2)

	cancel1() // the leader gives up; the build goes on for caller 2
	if err := <-err1; !errors.Is(err, context.Canceled) {
		t.Fatalf("caller 1: %v", err)
	}
	close(fb.release)
	if err := <-err2; err != nil {
		t.Fatalf("caller 2: %v", err)
	}
	if n := fb.calls.Load(); n != 1 {
		t.Fatalf("builder ran %d times", n)
	}

	// When every waiter leaves, the build is cancelled and cleaned up.
	fb.release = make(chan struct{})
	ctx3, cancel3 := context.WithCancel(context.Background())
	go func() { _, err := m.Build(ctx3, "base", BuildOptions{Force: true}, nil); err1 <- err }()
	waitCalls(t, fb, 2)
	cancel3()
	if err := <-err1; !errors.Is(err, context.Canceled) {
		t.Fatalf("caller 3: %v", err)
	}
	// The last waiter returns only after the build stopped and cleaned up.
	noTmpLeft(t, dir)
	m.mu.Lock()
	_, inFlight := m.builds["base"]
	m.mu.Unlock()
	if inFlight {
		t.Fatal("cancelled build still registered")
	}
}

func waitCalls(t *testing.T, fb *fakeBuilder, n int32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for fb.calls.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("builder calls %d, want %d", fb.calls.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitWaiters(t *testing.T, m *Manager, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		m.mu.Lock()
		c := m.builds[name]
		m.mu.Unlock()
		if c != nil {
			c.mu.Lock()
			w := c.waiters
			c.mu.Unlock()
			if w == n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiters for %s never reached %d", name, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
