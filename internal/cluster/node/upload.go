package node

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Background uploads of paused images (issue 24; moved here from
// internal/sandbox/upload.go in issue 25). On a cluster node a pause
// answers once the checkpoint is durable here (fsync'd: the memory image
// and the writable layer), its row saying paused and uploading
// (extra.Uploading); the image then goes to the artifact store in the
// background, and the row gets its key and digest (extra.Image: movable)
// when it is there. The core tells the hooks when (sandbox.NodeHooks):
//
//   - Paused starts the upload, which retries (with a backoff) until it
//     succeeds, the sandbox is resumed here (Resuming cancels it and waits:
//     a running sandbox needs no image) or killed (Gone cancels it);
//   - a daemon restart finds the row uploading and the checkpoint here, and
//     starts the upload again (Reattached; sandbox/reattach.go);
//   - an evacuation (drain, stop) waits for it (AwaitUpload): for the
//     attempt in flight, and reports that attempt's error when it fails;
//   - the api tier moves only movable sandboxes: for a paused sandbox still
//     uploading on a draining node it first waits here for the upload
//     (POST …/sandboxes/<id>/uploaded, bounded; AwaitUpload in moves.go),
//     and a node that cannot be reached before its upload finished is
//     reported as such: the sandbox resumes when that node is back
//     (internal/cluster/gateway);
//   - the manager's Close cancels them all and waits (Close).
//
// The state is the node's: one upload per sandbox (uploads.byLive).

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

// uploads holds a node's background uploads.
type uploads struct {
	mu     sync.Mutex
	byLive map[*sandbox.Live]*upload
	wg     sync.WaitGroup
}

// Paused starts the background upload of e, paused here with its row
// saying uploading (sandbox.NodeHooks). A running upload is left alone.
func (h *hooks) Paused(e *sandbox.Live) { h.startUpload(e) }

// Reattached starts again the upload of e, re-attached paused at start,
// when its row says it was cut short (a daemon stopped or killed during
// it).
func (h *hooks) Reattached(e *sandbox.Live) {
	if !e.StillUploading() {
		return
	}
	e.Log().Info("finishing the interrupted upload of a paused sandbox", "sandbox", e.ID())
	h.startUpload(e)
}

func (h *hooks) startUpload(e *sandbox.Live) {
	// Asked before h.up.mu is taken: Gone runs under e's lock and takes
	// h.up.mu. A sandbox that goes meanwhile ends the loop at its first
	// check.
	if !e.StillUploading() {
		return
	}
	h.up.mu.Lock()
	if _, ok := h.up.byLive[e]; ok {
		h.up.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	u := &upload{cancel: cancel, done: make(chan struct{}), changed: make(chan struct{})}
	if h.up.byLive == nil {
		h.up.byLive = map[*sandbox.Live]*upload{}
	}
	h.up.byLive[e] = u
	h.up.wg.Add(1)
	h.up.mu.Unlock()
	go func() {
		defer h.up.wg.Done()
		defer close(u.done)
		defer cancel()
		h.runUpload(ctx, e, u)
		h.up.mu.Lock()
		if h.up.byLive[e] == u {
			delete(h.up.byLive, e)
		}
		h.up.mu.Unlock()
	}()
}

// of returns e's upload in progress, or nil.
func (h *hooks) of(e *sandbox.Live) *upload {
	h.up.mu.Lock()
	defer h.up.mu.Unlock()
	return h.up.byLive[e]
}

// runUpload uploads e's image until it is in the store and recorded in
// the row, or ctx ends, or the sandbox is no longer paused here.
func (h *hooks) runUpload(ctx context.Context, e *sandbox.Live, u *upload) {
	id, log := e.ID(), e.Log()
	backoff := uploadBackoffMin
	for {
		if !e.StillUploading() || ctx.Err() != nil {
			return
		}
		start := time.Now()
		im, err := h.ExportPaused(ctx, e)
		if err == nil {
			err = e.CommitUpload(ctx, im)
			if err == nil {
				log.Info("paused sandbox's image uploaded in the background", "sandbox", id, "key", im.Key, "elapsed", time.Since(start), "attempts", u.failures()+1)
				return
			}
			h.dropPausedLater(log, im.Key)
		}
		if ctx.Err() != nil || !e.StillUploading() {
			return
		}
		u.fail(err)
		log.Warn("uploading a paused sandbox's image failed; it stays paused on this node until an attempt succeeds", "sandbox", id, "retry_in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, uploadBackoffMax)
	}
}

// dropPausedLater removes an uploaded image that was not recorded, in the
// background (a failure is logged), as the manager drops images.
func (h *hooks) dropPausedLater(log *slog.Logger, key string) {
	h.up.wg.Add(1)
	go func() {
		defer h.up.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.DropPaused(ctx, key); err != nil {
			log.Warn("removing an image from the artifact store", "key", key, "err", err)
		}
	}()
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

// Gone cancels e's background upload, if any (e left the index). It runs
// under e's and the manager's locks: it does not call e.
func (h *hooks) Gone(e *sandbox.Live) {
	if u := h.of(e); u != nil {
		u.cancel()
	}
}

// Resuming cancels e's background upload, if any, and waits for it to end
// (a resume here: the image is not needed any more).
func (h *hooks) Resuming(e *sandbox.Live) {
	u := h.of(e)
	if u == nil {
		return
	}
	u.cancel()
	<-u.done
}

// AwaitUpload waits until e's background upload, if any, ended (nil: then
// the row says whether the image is in the store), or until the attempt in
// flight failed (its error), or ctx ended.
func (h *hooks) AwaitUpload(ctx context.Context, e *sandbox.Live) error {
	u := h.of(e)
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
		return fmt.Errorf("waiting for the upload of paused sandbox %s: %w", e.ID(), ctx.Err())
	}
}

// Close cancels the uploads in progress and waits (bounded by ctx) for
// them to end; a restart starts them again (Reattached).
func (h *hooks) Close(ctx context.Context) {
	h.up.mu.Lock()
	for _, u := range h.up.byLive {
		u.cancel()
	}
	h.up.mu.Unlock()
	done := make(chan struct{})
	go func() { h.up.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// awaitUploaded waits (bounded by ctx) until the paused sandbox e's image
// is in the artifact store, and says whether it is: nil when it is (or the
// sandbox is not paused here any more: the caller reads the row again), a
// 503 user error when the attempt in flight failed.
func (h *hooks) awaitUploaded(ctx context.Context, e *sandbox.Live) error {
	id := e.ID()
	if err := h.AwaitUpload(ctx, e); err != nil {
		return h.storeError(fmt.Sprintf("uploading the image of paused sandbox %s", id), err)
	}
	if e.StillUploading() {
		if ctx.Err() != nil {
			return &sandbox.Error{Code: http.StatusServiceUnavailable, Msg: fmt.Sprintf("sandbox %q: its image is still being uploaded to the artifact store", id)}
		}
		// Ended without committing (cancelled by a daemon stop).
		return &sandbox.Error{Code: http.StatusServiceUnavailable, Msg: fmt.Sprintf("sandbox %q: its image is not in the artifact store yet", id)}
	}
	return nil
}

// storeError is the user error of a failed artifact-store operation: 503
// when the store could not be reached, else 500; what says what failed
// (as the manager's).
func (h *hooks) storeError(what string, err error) error {
	if h.Unavailable(err) {
		return &sandbox.Error{Code: http.StatusServiceUnavailable, Msg: fmt.Sprintf("%s: the artifact store is unreachable: %v", what, err)}
	}
	return &sandbox.Error{Code: http.StatusInternalServerError, Msg: fmt.Sprintf("%s: %v", what, err)}
}

// ExportPaused uploads the image of e (busy, checkpointed here) under a
// new key: the agent binary it runs (by content), then the directory
// sandbox.Live.WriteImage writes (a saved copy of its writable layer, links
// to the memory image, image.json).
func (h *hooks) ExportPaused(ctx context.Context, e *sandbox.Live) (sandbox.PausedImage, error) {
	id := e.ID()
	start := time.Now()
	dir, im, remove, err := e.WriteImage(ctx, h.img.PutFile)
	if err != nil {
		return im, err
	}
	defer remove()
	saved := time.Since(start)
	if im.Key, im.Digest, err = h.storePaused(ctx, id, dir); err != nil {
		return sandbox.PausedImage{}, err
	}
	e.Log().Info("paused sandbox uploaded", "sandbox", id, "key", im.Key, "save", saved, "elapsed", time.Since(start))
	return im, nil
}
