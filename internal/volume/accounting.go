package volume

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// The use accounting of a DirBacking. A plain directory has no limit of
// its own, so the content API keeps one: before issue 27's cluster work it
// walked the whole volume on every upload, and two uploads at once could
// each see the same free space and pass the limit together. Now each
// volume has an account on the node: the bytes its files used at the last
// walk, plus what uploads finished since, plus what uploads under way hold.
// An upload takes its bytes from the account as it reads them (Upload), so
// the uploads of one node together never pass the limit. The account is
// walked again (DiskUsage) when it is older than RewalkAfter and no upload
// holds bytes (a walk would count their partial files twice): what
// sandboxes wrote, and what other nodes' content APIs wrote to a shared
// root, shows then.
//
// What this does not do: nothing below the content API limits a
// dir-backed volume. A sandbox that mounts it writes past the limit, up to
// the free space of the filesystem under the root; two nodes' uploads are
// counted apart (each sees the other's at its next walk), so together they
// can pass the limit by what they wrote within one RewalkAfter.

// DefaultRewalkAfter is DirBacking.RewalkAfter's default.
const DefaultRewalkAfter = 30 * time.Second

// Uploader is a Backing whose content API uploads take their space from a
// per-volume account (DirBacking). Backings whose filesystem enforces the
// limit (the loop backing's ext4 image) are not Uploaders.
type Uploader interface {
	// BeginUpload starts an upload to volume id; freed is what its end
	// frees (the size of the file an overwrite replaces), which it may
	// use while it runs. End must be called.
	BeginUpload(ctx context.Context, id string, freed int64) (*Upload, error)
}

// account is one volume's use on this node.
type account struct {
	mu       sync.Mutex
	size     int64 // the limit
	used     int64 // at the last walk, plus the finished uploads since
	reserved int64 // held by uploads under way
	walked   time.Time
	// walking is closed when the walk under way ends (nil: none).
	walking chan struct{}
}

// accounts are a DirBacking's accounts, by volume id.
type accounts struct {
	mu sync.Mutex
	m  map[string]*account
}

func (as *accounts) get(id string) *account {
	as.mu.Lock()
	defer as.mu.Unlock()
	if as.m == nil {
		as.m = map[string]*account{}
	}
	a := as.m[id]
	if a == nil {
		a = &account{}
		as.m[id] = a
	}
	return a
}

func (as *accounts) drop(id string) {
	as.mu.Lock()
	defer as.mu.Unlock()
	delete(as.m, id)
}

// fresh returns volume id's account, walked within the backing's
// RewalkAfter unless uploads hold bytes of it.
func (b *DirBacking) fresh(ctx context.Context, id string) (*account, error) {
	a := b.accts.get(id)
	for {
		a.mu.Lock()
		stale := a.walked.IsZero() || (b.now().Sub(a.walked) >= b.rewalkAfter() && a.reserved == 0)
		if !stale {
			a.mu.Unlock()
			return a, nil
		}
		if ch := a.walking; ch != nil {
			a.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		ch := make(chan struct{})
		a.walking = ch
		a.mu.Unlock()
		used, size, err := b.measure(ctx, id)
		a.mu.Lock()
		a.walking = nil
		close(ch)
		if err != nil {
			a.mu.Unlock()
			return nil, err
		}
		// An upload that began meanwhile was half counted: keep the
		// account (unless it has never been walked).
		if a.reserved == 0 || a.walked.IsZero() {
			a.used, a.size, a.walked = used, size, b.now()
		}
		a.mu.Unlock()
	}
}

func (b *DirBacking) rewalkAfter() time.Duration {
	if b.RewalkAfter > 0 {
		return b.RewalkAfter
	}
	return DefaultRewalkAfter
}

func (b *DirBacking) now() time.Time {
	if b.clock != nil {
		return b.clock()
	}
	return time.Now()
}

// BeginUpload implements Uploader.
func (b *DirBacking) BeginUpload(ctx context.Context, id string, freed int64) (*Upload, error) {
	if _, err := b.Dir(ctx, id); err != nil {
		if errors.Is(err, ErrNotFound) { // deleted, maybe by another node
			b.accts.drop(id)
		}
		return nil, err
	}
	a, err := b.fresh(ctx, id)
	if err != nil {
		return nil, err
	}
	return &Upload{a: a, freed: max(freed, 0)}, nil
}

// Upload is one content API upload's share of a volume's space: it holds
// the bytes it has read, and at End they become the volume's use (or go
// back, if it failed).
type Upload struct {
	a     *account
	freed int64
	held  int64
	ended bool
}

// Left is how many more bytes the upload may take now (what is free for
// it, uploads under way on this node counted).
func (u *Upload) Left() int64 {
	u.a.mu.Lock()
	defer u.a.mu.Unlock()
	return u.left()
}

func (u *Upload) left() int64 {
	return max(u.a.size+u.freed-u.a.used-u.a.reserved, 0)
}

// Size is the volume's limit.
func (u *Upload) Size() int64 {
	u.a.mu.Lock()
	defer u.a.mu.Unlock()
	return u.a.size
}

// Take holds n more bytes, or fails with ErrFull (holding nothing more)
// when they do not fit.
func (u *Upload) Take(n int64) error {
	u.a.mu.Lock()
	defer u.a.mu.Unlock()
	if u.ended {
		return fmt.Errorf("volume upload: taking %d bytes after its end", n)
	}
	if left := u.left(); n > left {
		return fmt.Errorf("%w: %d more bytes do not fit (%d of its %d bytes are free)", ErrFull, n, left, u.a.size)
	}
	u.a.reserved += n
	u.held += n
	return nil
}

// End gives the held bytes back; if the upload was written (ok), they are
// now used, and what it replaced (freed) is not.
func (u *Upload) End(ok bool) {
	u.a.mu.Lock()
	defer u.a.mu.Unlock()
	if u.ended {
		return
	}
	u.ended = true
	u.a.reserved -= u.held
	if ok {
		u.a.used = max(u.a.used+u.held-u.freed, 0)
	}
}

// Reader returns r taking each byte read from the upload's share: a read
// past what is free fails with ErrFull.
func (u *Upload) Reader(r io.Reader) io.Reader { return &takingReader{u: u, r: r} }

type takingReader struct {
	u *Upload
	r io.Reader
}

func (t *takingReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		if terr := t.u.Take(int64(n)); terr != nil {
			return 0, terr
		}
	}
	return n, err
}
