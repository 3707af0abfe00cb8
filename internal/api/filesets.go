package api

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// FileSets keeps the file sets uploaded for the copy() steps of SDK
// builds: <dir>/<files hash>.tar, content-addressed by the SDK's hash.
// A file set's modification time is its last use (uploaded, reported
// present to an SDK, or used by a build); GC removes the ones unused for a
// grace period that no running build has pinned. The SDK checks presence
// right before it starts a build, so a build in "waiting" finds its files
// for the whole grace period; one whose files were collected gets a 400
// naming the step and uploads again (the layer cache keeps the built
// steps, so nothing is rebuilt for it).
type FileSets struct {
	dir  string
	mu   sync.Mutex // orders GC against Present, Commit and Pin
	pins map[string]int
	now  func() time.Time
}

// NewFileSets returns the file sets under dir and removes the partial
// uploads a killed daemon left.
func NewFileSets(dir string) *FileSets {
	partial, _ := filepath.Glob(filepath.Join(dir, ".tmp-upload-*"))
	for _, p := range partial {
		_ = os.Remove(p)
	}
	return &FileSets{dir: dir, pins: map[string]int{}, now: time.Now}
}

// Dir is the directory holding the file sets.
func (f *FileSets) Dir() string { return f.dir }

func (f *FileSets) path(hash string) string { return filepath.Join(f.dir, hash+".tar") }

// touch marks the file set used now; f.mu is held.
func (f *FileSets) touch(hash string) error {
	now := f.now()
	return os.Chtimes(f.path(hash), now, now)
}

// Present reports whether the file set of hash is stored, and marks it
// used (so a build about to use it keeps it for the grace period).
func (f *FileSets) Present(hash string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.touch(hash) == nil
}

// CreateTemp makes a temporary file in Dir for an upload in progress.
func (f *FileSets) CreateTemp() (*os.File, error) {
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", f.dir, err)
	}
	return os.CreateTemp(f.dir, ".tmp-upload-")
}

// Commit moves a finished upload (a file from CreateTemp) into place as
// the file set of hash, marked used now.
func (f *FileSets) Commit(tmp, hash string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := os.Rename(tmp, f.path(hash)); err != nil {
		return fmt.Errorf("storing files %s: %w", hash, err)
	}
	return f.touch(hash)
}

// Pin keeps the file sets of hashes from GC until release is called (a
// running build reads them). It fails, pinning nothing, with the first
// hash that is not stored.
func (f *FileSets) Pin(hashes []string) (release func(), missing string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, h := range hashes {
		if f.touch(h) != nil {
			return nil, h
		}
	}
	for _, h := range hashes {
		f.pins[h]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			for _, h := range hashes {
				if f.pins[h]--; f.pins[h] <= 0 {
					delete(f.pins, h)
				}
				_ = f.touch(h) // the grace period counts from the build's end
			}
		})
	}, ""
}

// GC removes the file sets that no running build pins and that were last
// used more than grace ago; it returns the hashes removed.
func (f *FileSets) GC(grace time.Duration) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ents, err := os.ReadDir(f.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", f.dir, err)
	}
	cutoff := f.now().Add(-grace)
	var removed []string
	var errs []error
	for _, e := range ents {
		hash, ok := strings.CutSuffix(e.Name(), ".tar")
		if !ok || !isSHA256(hash) || !e.Type().IsRegular() || f.pins[hash] > 0 {
			continue
		}
		info, err := e.Info()
		if err != nil || !info.ModTime().Before(cutoff) {
			continue
		}
		if err := os.Remove(f.path(hash)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, hash)
	}
	return removed, errors.Join(errs...)
}
