package volume

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// fakeClock is a DirBacking's clock that tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newDirForTest(t *testing.T, sizeBytes int64) (*DirBacking, *fakeClock, string) {
	t.Helper()
	b, err := NewDirBacking(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	b.clock = clk.now
	b.RewalkAfter = time.Minute
	const id = "vol1"
	if err := b.Create(context.Background(), id, sizeBytes); err != nil {
		t.Fatal(err)
	}
	return b, clk, id
}

// upload writes n bytes to p through an Upload as the content API does for
// a body without a length (taken as read).
func upload(ctx context.Context, b *DirBacking, id, p string, n int) error {
	dir, err := b.Dir(ctx, id)
	if err != nil {
		return err
	}
	f, err := OpenFiles(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	u, err := b.BeginUpload(ctx, id, 0)
	if err != nil {
		return err
	}
	ok := false
	defer func() { u.End(ok) }()
	if _, err := f.Write(ctx, p, u.Reader(bytes.NewReader(make([]byte, n))), -1, Owner{}, false); err != nil {
		return err
	}
	ok = true
	return nil
}

// Concurrent uploads on one node never pass the limit together (before:
// each read the same free space from a walk and all of them passed).
func TestDirConcurrentUploadsShareTheLimit(t *testing.T) {
	ctx := context.Background()
	const size = 1 << 20
	b, _, id := newDirForTest(t, size)
	const writers, each = 8, 300 << 10
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Go(func() { errs[i] = upload(ctx, b, id, "/f"+string(rune('a'+i)), each) })
	}
	wg.Wait()
	okN := 0
	for i, err := range errs {
		switch {
		case err == nil:
			okN++
		case !errors.Is(err, ErrFull):
			t.Fatalf("writer %d: %v, want nil or ErrFull", i, err)
		}
	}
	if okN == 0 || okN*each > size {
		t.Fatalf("%d uploads of %d bytes fit in %d bytes", okN, each, size)
	}
	used, _, err := b.Usage(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if used != int64(okN*each) {
		t.Fatalf("account says %d bytes used, want %d", used, okN*each)
	}
	dir, _ := b.Dir(ctx, id)
	onDisk, err := DiskUsage(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if onDisk > size+64<<10 { // blocks round up; directories take a few
		t.Fatalf("the volume holds %d bytes, its limit is %d", onDisk, size)
	}
}

// The volume is walked once per RewalkAfter, not per upload; what was
// written around the content API (a sandbox, another node) shows at the
// next walk; no walk while an upload holds bytes.
func TestDirUsageWalksRarely(t *testing.T) {
	ctx := context.Background()
	b, clk, id := newDirForTest(t, 64<<20)
	for i := range 20 {
		if err := upload(ctx, b, id, "/u"+string(rune('a'+i)), 4096); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.walks.Load(); n != 0 {
		t.Fatalf("%d walks for 20 uploads to a volume created here, want 0", n)
	}
	used, _, _ := b.Usage(ctx, id)
	if used != 20*4096 {
		t.Fatalf("used = %d, want %d", used, 20*4096)
	}
	dir, _ := b.Dir(ctx, id)
	if err := os.WriteFile(filepath.Join(dir, "by-a-sandbox"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if u, _, _ := b.Usage(ctx, id); u != used {
		t.Fatalf("used = %d before RewalkAfter, want the account's %d", u, used)
	}
	// An upload under way when the account gets old: no walk (its partial
	// file would count twice).
	u, err := b.BeginUpload(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Take(100); err != nil {
		t.Fatal(err)
	}
	clk.add(2 * time.Minute)
	if _, _, err := b.Usage(ctx, id); err != nil {
		t.Fatal(err)
	}
	if n := b.walks.Load(); n != 0 {
		t.Fatalf("walked %d times while an upload held bytes, want 0", n)
	}
	u.End(false)
	used2, _, err := b.Usage(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if n := b.walks.Load(); n != 1 {
		t.Fatalf("%d walks after RewalkAfter, want 1", n)
	}
	if used2 < used+1<<20 {
		t.Fatalf("used = %d after the walk, want at least %d (the sandbox's file counted)", used2, used+1<<20)
	}
	// A new backing (a restarted node, another node) walks once.
	b2, err := NewDirBacking(filepath.Dir(filepath.Dir(dir)))
	if err != nil {
		t.Fatal(err)
	}
	if u, _, err := b2.Usage(ctx, id); err != nil || u != used2 {
		t.Fatalf("a fresh backing's Usage = %d, %v, want %d", u, err, used2)
	}
	if _, _, err := b2.Usage(ctx, id); err != nil || b2.walks.Load() != 1 {
		t.Fatalf("a fresh backing walked %d times for two Usage calls, want 1 (%v)", b2.walks.Load(), err)
	}
}

// An overwrite may use the space of the file it replaces; a failed upload
// gives its bytes back; Take past the free space holds nothing.
func TestDirUploadAccounting(t *testing.T) {
	ctx := context.Background()
	b, _, id := newDirForTest(t, 1000)
	u, err := b.BeginUpload(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Take(800); err != nil {
		t.Fatal(err)
	}
	if err := u.Take(300); !errors.Is(err, ErrFull) {
		t.Fatalf("Take past the limit = %v, want ErrFull", err)
	}
	u.End(true) // 800 used
	over, err := b.BeginUpload(ctx, id, 800)
	if err != nil {
		t.Fatal(err)
	}
	if got := over.Left(); got != 1000 {
		t.Fatalf("an overwrite of the 800 bytes has %d left, want 1000", got)
	}
	if err := over.Take(900); err != nil {
		t.Fatal(err)
	}
	other, _ := b.BeginUpload(ctx, id, 0)
	if err := other.Take(200); !errors.Is(err, ErrFull) {
		t.Fatalf("a second upload while the overwrite holds 900 = %v, want ErrFull", err)
	}
	other.End(false)
	over.End(true) // 800 - 800 + 900
	if used, _, _ := b.Usage(ctx, id); used != 900 {
		t.Fatalf("used = %d after the overwrite, want 900", used)
	}
	failed, _ := b.BeginUpload(ctx, id, 0)
	if err := failed.Take(100); err != nil {
		t.Fatal(err)
	}
	failed.End(false)
	if used, _, _ := b.Usage(ctx, id); used != 900 {
		t.Fatalf("used = %d after a failed upload, want 900", used)
	}
	if err := b.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := b.BeginUpload(ctx, id, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("upload to a deleted volume = %v, want ErrNotFound", err)
	}
}
