package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// Background uploads of paused images (issue 24). On a cluster node a pause
// answers once the checkpoint is durable here (fsync'd: the memory image
// and the writable layer), its row saying paused and uploading
// (extra.Uploading); the image then goes to the artifact store in the
// background, and the row gets its key and digest (extra.Image: movable)
// when it is there:
//
//   - the upload retries (with a backoff) until it succeeds, the sandbox is
//     resumed here (the resume cancels it: a running sandbox needs no
//     image) or killed;
//   - a daemon restart finds the row uploading and the checkpoint here, and
//     starts the upload again (reattach.go);
//   - an evacuation (drain, stop) waits for it: for the attempt in flight,
//     and reports that attempt's error when it fails;
//   - the api tier moves only movable sandboxes: for a paused sandbox still
//     uploading on a draining node it first waits here for the upload
//     (POST …/sandboxes/<id>/uploaded, bounded; AwaitUpload), and a node
//     that cannot be reached before its upload finished is reported as
//     such: the sandbox resumes when that node is back (internal/cluster/gateway).

// upload is the background upload of one paused sandbox's image.
type upload struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the upload ended (committed, cancelled or given up)

	// mu guards the fields below.
	mu       sync.Mutex
	attempts int   // failed attempts so far
	lastErr  error // the last failed attempt's error
	// changed is closed (and replaced) when an attempt fails.
	changed chan struct{}
}

// uploadBackoff bounds the wait between two attempts.
const (
	uploadBackoffMin = 500 * time.Millisecond
	uploadBackoffMax = 30 * time.Second
)

// uploaders holds the manager's background uploads: their context is
// cancelled by Close (a restart starts them again).
type uploaders struct {
	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (u *uploaders) init() {
	u.once.Do(func() { u.ctx, u.cancel = context.WithCancel(context.Background()) })
}

// stop cancels the uploads in progress and waits (bounded by ctx) for
// them to end.
func (u *uploaders) stop(ctx context.Context) {
	u.init()
	u.cancel()
	done := make(chan struct{})
	go func() { u.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// startUpload starts the background upload of e, paused here with its row
// saying uploading. A running upload is left alone.
func (e *Live) startUpload() {
	m := e.m
	m.uploads.init()
	e.mu.Lock()
	if e.up != nil || e.gone {
		e.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(m.uploads.ctx)
	u := &upload{cancel: cancel, done: make(chan struct{}), changed: make(chan struct{})}
	e.up = u
	m.uploads.wg.Add(1)
	e.mu.Unlock()
	go func() {
		defer m.uploads.wg.Done()
		defer close(u.done)
		defer cancel()
		e.runUpload(ctx, u)
		e.mu.Lock()
		if e.up == u {
			e.up = nil
		}
		e.mu.Unlock()
	}()
}

// runUpload uploads e's image until it is in the store and recorded in
// the row, or ctx ends, or the sandbox is no longer paused here.
func (e *Live) runUpload(ctx context.Context, u *upload) {
	m, id := e.m, e.rec.ID
	backoff := uploadBackoffMin
	for {
		if !e.stillUploading() || ctx.Err() != nil {
			return
		}
		start := time.Now()
		ex, err := e.export(ctx)
		if err == nil {
			err = e.commitUpload(ctx, ex)
			if err == nil {
				m.log.Info("paused sandbox's image uploaded in the background", "sandbox", id, "key", ex.key, "elapsed", time.Since(start), "attempts", u.failures()+1)
				return
			}
			m.dropImage(ex.key)
		}
		if ctx.Err() != nil || !e.stillUploading() {
			return
		}
		u.fail(err)
		m.log.Warn("uploading a paused sandbox's image failed; it stays paused on this node until an attempt succeeds", "sandbox", id, "retry_in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, uploadBackoffMax)
	}
}

// stillUploading reports whether e is paused here with its row saying
// uploading.
func (e *Live) stillUploading() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.gone && e.rec.State == StatePaused && decodeExtra(e.rec.Extra).Uploading
}

// commitUpload records ex in e's row (movable from then on) unless the
// upload was cancelled or the sandbox is no longer paused and uploading:
// then ex is dropped from the store by the caller.
func (e *Live) commitUpload(ctx context.Context, ex exported) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if e.gone || e.rec.State != StatePaused || !decodeExtra(e.rec.Extra).Uploading {
		return errors.New("the sandbox is no longer paused here")
	}
	rec := e.rec
	x := decodeExtra(rec.Extra)
	x.Uploading = false
	rec.Extra = encodeExtra(withImage(x, ex))
	// Written even if ctx ends now: the image is in the store.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := e.m.cfg.Store.PutSandbox(cctx, &rec); err != nil {
		return fmt.Errorf("saving the uploaded image of %s: %w", rec.ID, err)
	}
	e.rec = rec
	return nil
}

func (u *upload) fail(err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.attempts++
	u.lastErr = err
	close(u.changed)
	u.changed = make(chan struct{})
}

func (u *upload) failures() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.attempts
}

// stopUpload cancels e's background upload, if any, and waits for it to
// end (a resume here: the image is not needed any more).
func (e *Live) stopUpload() {
	e.mu.Lock()
	u := e.up
	e.mu.Unlock()
	if u == nil {
		return
	}
	u.cancel()
	<-u.done
}

// awaitUpload waits until e's background upload, if any, ended (nil: then
// the row says whether the image is in the store), or until the attempt in
// flight failed (its error), or ctx ended.
func (e *Live) awaitUpload(ctx context.Context) error {
	e.mu.Lock()
	u := e.up
	e.mu.Unlock()
	if u == nil {
		return nil
	}
	u.mu.Lock()
	changed := u.changed
	u.mu.Unlock()
	select {
	case <-u.done:
		return nil
	case <-changed:
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.lastErr
	case <-ctx.Done():
		return fmt.Errorf("waiting for the upload of paused sandbox %s: %w", e.rec.ID, ctx.Err())
	}
}

// AwaitUpload waits (bounded by ctx) until the paused sandbox e's image
// is in the artifact store, and says whether it is: nil when it is (or the
// sandbox is not paused here any more: the caller reads the row again), a
// 503 user error when the attempt in flight failed. The api tier asks
// (through internal/cluster/node) before it moves a paused sandbox of a
// draining node.
func (e *Live) AwaitUpload(ctx context.Context) error {
	m, id := e.m, e.rec.ID
	if err := e.awaitUpload(ctx); err != nil {
		return m.storeError(fmt.Sprintf("uploading the image of paused sandbox %s", id), err)
	}
	if e.stillUploading() {
		if ctx.Err() != nil {
			return userErrorf(http.StatusServiceUnavailable, "sandbox %q: its image is still being uploaded to the artifact store", id)
		}
		// Ended without committing (cancelled by a daemon stop).
		return userErrorf(http.StatusServiceUnavailable, "sandbox %q: its image is not in the artifact store yet", id)
	}
	return nil
}

// syncPaused makes the checkpoint of sandbox id durable on this node: the
// files of its memory image and their directory are fsync'd, and so is its
// writable layer (the file system mounted on <dir>/layer, then disk.img
// under it). A background upload, or a restart's, reads them.
func (m *Manager) syncPaused(id string) error {
	img := m.imageDir(id)
	ents, err := os.ReadDir(img)
	if err != nil {
		return err
	}
	var errs []error
	for _, ent := range ents {
		if ent.Type().IsRegular() {
			errs = append(errs, fsyncPath(filepath.Join(img, ent.Name())))
		}
	}
	errs = append(errs, fsyncPath(img))
	dir := m.sandboxDir(id)
	if f, err := os.Open(filepath.Join(dir, "layer")); err == nil {
		errs = append(errs, unix.Syncfs(int(f.Fd())))
		f.Close()
	}
	for _, name := range []string{"disk.img", "."} {
		if err := fsyncPath(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("syncing the checkpoint of %s: %w", id, err)
	}
	return nil
}

func fsyncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// resumeUpload starts again the upload of sandbox id, re-attached paused
// at start, when its row says it was cut short (a daemon stopped or killed
// during it).
func (m *Manager) resumeUpload(id string) {
	if m.cfg.Node == nil {
		return
	}
	e, err := m.Lookup(id)
	if err != nil || !e.stillUploading() {
		return
	}
	m.log.Info("finishing the interrupted upload of a paused sandbox", "sandbox", id)
	e.startUpload()
}

// uploadAtStartTimeout bounds uploadAtStart.
const uploadAtStartTimeout = 2 * time.Minute

// uploadAtStart uploads, at start, the image of a paused sandbox whose
// upload was cut short and which cannot be re-attached here (its network
// is gone), from the checkpoint kept here, and records it in row: the
// sandbox is then re-attached from the store like any moved one. When the
// upload fails row is left as it was.
func (m *Manager) uploadAtStart(ctx context.Context, row *store.Sandbox) {
	ctx, cancel := context.WithTimeout(ctx, uploadAtStartTimeout)
	defer cancel()
	e := m.newLive(row, netip.Addr{}, false) // not indexed: only export reads it
	ex, err := e.export(ctx)
	if err != nil {
		m.log.Error("uploading the checkpoint of a paused sandbox whose upload was cut short", "sandbox", row.ID, "err", err)
		return
	}
	orig := row.Extra
	x := withImage(decodeExtra(row.Extra), ex)
	x.Uploading = false
	row.Extra = encodeExtra(x)
	if err := m.cfg.Store.PutSandbox(ctx, row); err != nil {
		m.dropImage(ex.key)
		m.log.Error("saving the uploaded image of a paused sandbox", "sandbox", row.ID, "err", err)
		row.Extra = orig
		return
	}
	m.log.Info("uploaded at start the checkpoint of a paused sandbox whose upload was cut short", "sandbox", row.ID, "key", ex.key)
}
