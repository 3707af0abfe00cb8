package artifacts

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/artifacts/tree"
)

// Store is a Backend with a local cache of verified content:
//
//	<cache>/sha256/<hex>   a file fetched by Get (read-only)
//	<cache>/trees/<hex>/   a directory fetched by GetDir (the unpacked tree)
//	<cache>/.tmp-*         downloads, unpacks and packs in progress (removed by New)
//
// Cache entries are named by digest and appear only by a rename after their
// bytes were checked, so a crash or an unreachable backend leaves nothing
// half-written under a cache name. Concurrent Gets of one digest download
// once. Callers must not modify what Get and GetDir return.
type Store struct {
	b     Backend
	cache string
	log   *slog.Logger

	// mu guards flights: the downloads in progress, by cache name.
	mu      sync.Mutex
	flights map[string]*flight
}

// NewStore opens a store over b with its cache in cacheDir (created; left
// overs of a crash removed).
func NewStore(b Backend, cacheDir string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	abs, err := filepath.Abs(cacheDir)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{abs, filepath.Join(abs, "sha256"), filepath.Join(abs, "trees")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("artifacts: creating cache %s: %w", d, err)
		}
	}
	ents, err := os.ReadDir(abs)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			if err := removeAll(filepath.Join(abs, e.Name())); err != nil {
				log.Warn("artifacts: removing a partial cache entry", "path", e.Name(), "err", err)
			}
		}
	}
	return &Store{b: b, cache: abs, log: log, flights: map[string]*flight{}}, nil
}

// Backend is the store's backend.
func (s *Store) Backend() Backend { return s.b }

// CacheDir is the store's cache directory.
func (s *Store) CacheDir() string { return s.cache }

func (s *Store) String() string { return s.b.String() }

// Put stores r (size bytes, or -1 when unknown) under key, if it hashes to
// want; see Backend.Put.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, want Digest) (Info, error) {
	if err := ValidKey(key); err != nil {
		return Info{}, err
	}
	if err := want.Validate(); err != nil {
		return Info{}, err
	}
	if d, ok := KeyDigest(key); ok && d != want {
		return Info{}, fmt.Errorf("%w: key %s names %s, %s was given", ErrDigestMismatch, key, d, want)
	}
	return s.b.Put(ctx, key, r, size, want)
}

// PutFile stores a file under its BlobKey (not again when it is there).
func (s *Store) PutFile(ctx context.Context, path string) (Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	d, size, err := DigestReader(f)
	if err != nil {
		return Info{}, fmt.Errorf("hashing %s: %w", path, err)
	}
	return s.putOnce(ctx, BlobKey(d), f, size, d)
}

// PutDir packs dir (see tree.Pack) into a temporary file in the cache, then
// stores it under its TreeKey (not again when it is there).
func (s *Store) PutDir(ctx context.Context, dir string) (Info, error) {
	return s.PutDirSkip(ctx, dir, nil)
}

// PutDirSkip is PutDir without the paths in skip (see tree.PackSkip).
func (s *Store) PutDirSkip(ctx context.Context, dir string, skip map[string]bool) (Info, error) {
	tmp, err := os.CreateTemp(s.cache, ".tmp-pack-*")
	if err != nil {
		return Info{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	if err := tree.PackSkip(ctx, io.MultiWriter(tmp, h), dir, skip); err != nil {
		return Info{}, fmt.Errorf("packing %s: %w", dir, err)
	}
	d := digestOf(h)
	size, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return Info{}, err
	}
	return s.putOnce(ctx, TreeKey(d), tmp, size, d)
}

// putOnce stores the content of f (size bytes, digest d) under key from its
// start, unless key already holds that digest.
func (s *Store) putOnce(ctx context.Context, key string, f io.ReadSeeker, size int64, d Digest) (Info, error) {
	if info, err := s.b.Stat(ctx, key); err == nil && info.Digest == d {
		return info, nil
	} else if !errors.Is(err, ErrNotFound) && err != nil {
		return Info{}, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Info{}, err
	}
	return s.b.Put(ctx, key, f, size, d)
}

// Exists reports whether key holds an object.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	if err := ValidKey(key); err != nil {
		return false, err
	}
	_, err := s.b.Stat(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Stat describes the object under key.
func (s *Store) Stat(ctx context.Context, key string) (Info, error) {
	if err := ValidKey(key); err != nil {
		return Info{}, err
	}
	return s.b.Stat(ctx, key)
}

// Delete removes key (a missing key is not an error). Cached copies stay:
// they are named by digest and may serve other keys.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	return s.b.Delete(ctx, key)
}

// List returns the objects whose keys start with prefix, sorted by key.
func (s *Store) List(ctx context.Context, prefix string) ([]Info, error) {
	if err := validPrefix(prefix); err != nil {
		return nil, err
	}
	return s.b.List(ctx, prefix)
}

// caDigest returns the digest a content-addressed key names. Other keys
// (refs: paused/…, snapshots/…, templates/…) are rewritable, and the digest
// S3 metadata records for them is whatever their last writer said: they are
// fetched with GetRef and the digest their owner recorded in the database.
func caDigest(key string) (Digest, error) {
	if err := ValidKey(key); err != nil {
		return "", err
	}
	d, ok := KeyDigest(key)
	if !ok {
		return "", fmt.Errorf("%w %q: not content-addressed; fetch it with GetRef and the digest its writer recorded", ErrInvalidKey, key)
	}
	return d, nil
}

// Get returns the path of a cached, verified copy of the object under the
// content-addressed key (BlobKey, TreeKey), downloading it when the cache
// does not hold its digest yet; when it does, no request is made.
func (s *Store) Get(ctx context.Context, key string) (string, error) {
	d, err := caDigest(key)
	if err != nil {
		return "", err
	}
	return s.getFile(ctx, key, d)
}

// GetRef returns the path of a cached copy of the object under the ref key
// (any key), verified against want: the digest its writer recorded where
// the reader trusts it (a database row), never the object's metadata. A
// rewritten object is ErrDigestMismatch, and nothing of it is kept.
func (s *Store) GetRef(ctx context.Context, key string, want Digest) (string, error) {
	if err := ValidKey(key); err != nil {
		return "", err
	}
	if err := want.Validate(); err != nil {
		return "", err
	}
	if d, ok := KeyDigest(key); ok && d != want {
		return "", fmt.Errorf("%w: key %s names %s, %s was given", ErrDigestMismatch, key, d, want)
	}
	return s.getFile(ctx, key, want)
}

func (s *Store) getFile(ctx context.Context, key string, d Digest) (string, error) {
	dst := filepath.Join(s.cache, "sha256", d.Hex())
	return s.once(ctx, dst, func(ctx context.Context) error { return s.dropCorrupt(ctx, key, s.fetchFile(ctx, key, d, dst)) })
}

// GetDir returns the path of a cached, verified, unpacked copy of the tree
// under the content-addressed key (TreeKey: an object written by PutDir or
// tree.Pack). The packed tree is downloaded to a temporary file and checked
// before it is unpacked: the unpacker never reads unverified bytes.
func (s *Store) GetDir(ctx context.Context, key string) (string, error) {
	d, err := caDigest(key)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(s.cache, "trees", d.Hex())
	return s.once(ctx, dst, func(ctx context.Context) error { return s.dropCorrupt(ctx, key, s.fetchTree(ctx, key, d, dst)) })
}

// dropCorrupt removes a content-addressed object whose fetch failed with
// ErrDigestMismatch: its bytes (or recorded digest) do not match its name,
// and putOnce skips any upload to a key whose recorded digest is right, so
// the object would stay corrupted forever. Once removed, the next PutFile or
// PutDir of that content uploads it again. Other keys (refs, whose digest is
// the recorded one) are left alone: their writer decides.
func (s *Store) dropCorrupt(ctx context.Context, key string, err error) error {
	if !errors.Is(err, ErrDigestMismatch) {
		return err
	}
	if _, ok := KeyDigest(key); !ok {
		return err
	}
	if derr := s.b.Delete(ctx, key); derr != nil {
		s.log.Warn("artifacts: removing a corrupted object", "key", key, "store", s.b.String(), "err", derr)
		return fmt.Errorf("%w (removing the corrupted object failed: %v)", err, derr)
	}
	s.log.Warn("artifacts: removed a corrupted object; the next put of its content uploads it again", "key", key, "store", s.b.String(), "err", err)
	return fmt.Errorf("%w (the corrupted object was removed; the next put uploads it again)", err)
}

// download fetches the object under key into a new temporary file of the
// cache and checks that its bytes hash to want (the object's recorded
// digest is checked first, to fail early, but decides nothing). On success
// the caller owns the file (named .tmp-<kind>-*: NewStore removes left
// overs); on failure nothing is left.
func (s *Store) download(ctx context.Context, key string, want Digest, kind string) (tmp string, err error) {
	rc, info, err := s.b.Open(ctx, key)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	if info.Digest != want {
		return "", fmt.Errorf("%w: %s is stored with digest %s, want %s", ErrDigestMismatch, key, info.Digest, want)
	}
	f, err := os.CreateTemp(s.cache, ".tmp-"+kind+"-*")
	if err != nil {
		return "", err
	}
	name := f.Name()
	defer func() {
		f.Close() // after the explicit Close below: an error, ignored
		if err != nil {
			os.Remove(name)
		}
	}()
	h := sha256.New()
	if err := copyPipelined(io.MultiWriter(f, h), ctxReader{ctx, rc}); err != nil {
		return "", fmt.Errorf("downloading %s: %w", key, err)
	}
	if got := digestOf(h); got != want {
		return "", fmt.Errorf("%w: %s downloaded as %s, want %s", ErrDigestMismatch, key, got, want)
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return name, nil
}

func (s *Store) fetchFile(ctx context.Context, key string, want Digest, dst string) (err error) {
	tmp, err := s.download(ctx, key, want, "get")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	f, err := os.Open(tmp)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Chmod(0o444); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	syncDir(filepath.Dir(dst))
	return nil
}

// fetchTree downloads the packed tree under key into a temporary file,
// checks its digest, and only then unpacks it (as root: owners, modes,
// the extended attributes and device nodes tree.Unpack accepts) into a
// temporary directory that is renamed to dst. Neither the decoder, the tar
// reader nor anything that later reads the unpacked files (a runtime's
// memory state, a root filesystem) sees bytes that were not verified.
func (s *Store) fetchTree(ctx context.Context, key string, want Digest, dst string) (err error) {
	start := time.Now()
	pack, err := s.download(ctx, key, want, "pack")
	if err != nil {
		return err
	}
	downloaded := time.Since(start)
	defer func() {
		if err == nil {
			s.log.Info("artifacts: tree fetched", "key", key, "download_verify", downloaded, "unpack", time.Since(start)-downloaded)
		}
	}()
	defer os.Remove(pack)
	f, err := os.Open(pack)
	if err != nil {
		return err
	}
	defer f.Close()
	tmp, err := os.MkdirTemp(s.cache, ".tmp-tree-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			if rerr := removeAll(tmp); rerr != nil {
				s.log.Warn("artifacts: removing a partial cache entry", "path", tmp, "err", rerr)
			}
		}
	}()
	if err := tree.Unpack(ctx, ctxReader{ctx, f}, filepath.Join(tmp, "t")); err != nil {
		return fmt.Errorf("unpacking %s: %w", key, err)
	}
	if err := os.Rename(filepath.Join(tmp, "t"), dst); err != nil {
		return err
	}
	syncDir(filepath.Dir(dst))
	return os.Remove(tmp)
}

// flight is one download in progress; waiters share it. It is cancelled
// when every waiter has gone.
type flight struct {
	done    chan struct{}
	err     error
	waiters int
	cancel  context.CancelFunc
}

// once runs fetch to create dst unless dst exists, with at most one fetch
// per dst at a time; every caller waits for that one.
func (s *Store) once(ctx context.Context, dst string, fetch func(context.Context) error) (string, error) {
	for {
		if _, err := os.Lstat(dst); err == nil {
			return dst, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		s.mu.Lock()
		f, ok := s.flights[dst]
		if !ok {
			fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			f = &flight{done: make(chan struct{}), cancel: cancel}
			s.flights[dst] = f
			go func() {
				err := fetch(fctx)
				cancel()
				s.mu.Lock()
				f.err = err
				delete(s.flights, dst)
				s.mu.Unlock()
				close(f.done)
			}()
		}
		f.waiters++
		s.mu.Unlock()
		select {
		case <-f.done:
			s.leave(f)
			if f.err != nil {
				// A fetch cancelled because its other waiters left is
				// not this caller's failure: try again.
				if errors.Is(f.err, context.Canceled) && ctx.Err() == nil {
					continue
				}
				return "", f.err
			}
			return dst, nil
		case <-ctx.Done():
			s.leave(f)
			return "", ctx.Err()
		}
	}
}

func (s *Store) leave(f *flight) {
	s.mu.Lock()
	f.waiters--
	if f.waiters == 0 {
		f.cancel()
	}
	s.mu.Unlock()
}

// removeAll removes a tree, making read-only directories writable first.
func removeAll(p string) error {
	if err := os.RemoveAll(p); err == nil {
		return nil
	}
	filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(q, 0o700)
		}
		return nil
	})
	return os.RemoveAll(p)
}

// copyPipelined copies r to w with the reads in a goroutine of their own,
// so that the next chunk arrives from the network while w (the temporary
// file and the hash of a download) takes the last one: a 120 MiB memory
// image otherwise waits for each in turn (BenchmarkImageGetS3). Chunks of
// up to 1 MiB, three in flight. On an error of w the reader is left to end
// with r (the caller closes it).
func copyPipelined(w io.Writer, r io.Reader) error {
	type chunk struct {
		b   []byte
		err error
	}
	const size, depth = 1 << 20, 3
	free := make(chan []byte, depth)
	for range depth {
		free <- make([]byte, size)
	}
	full := make(chan chunk, depth)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			var b []byte
			select {
			case b = <-free:
			case <-done:
				return
			}
			n, err := io.ReadFull(r, b)
			if err == io.ErrUnexpectedEOF {
				err = io.EOF
			}
			select {
			case full <- chunk{b[:n], err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range full {
		if len(c.b) > 0 {
			if _, err := w.Write(c.b); err != nil {
				return err
			}
		}
		if c.err == io.EOF {
			return nil
		}
		if c.err != nil {
			return c.err
		}
		free <- c.b[:cap(c.b)]
	}
	return nil
}
