package artifacts

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Local is a backend in a directory (the single-host default). An object is
// the file <root>/<key>; its digest is kept in <root>/.sha256/<key>. Writes
// go to <root>/.tmp/ and are renamed into place once verified and synced.
// A root that is missing (an unmounted shared filesystem) makes every
// operation answer an *UnavailableError.
type Local struct {
	root string

	// mu orders the two renames of a Put (digest, then object), so that
	// concurrent Puts of one key in this process leave a digest that
	// matches the object.
	mu sync.Mutex
}

var _ Backend = (*Local)(nil)

// staleTmpAge is how old a partial write in .tmp must be before NewLocal
// removes it.
const staleTmpAge = time.Hour

// NewLocal opens (and creates) a local backend at root.
func NewLocal(root string) (*Local, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("artifacts: resolving %q: %w", root, err)
	}
	for _, d := range []string{abs, filepath.Join(abs, ".tmp"), filepath.Join(abs, ".sha256")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("artifacts: creating %s: %w", d, err)
		}
	}
	// Partial writes of a crashed process. The directory may be shared by
	// the daemons of several hosts (a cluster's nodes on one machine, or an
	// NFS mount), so only what nobody touched for a while goes: removing a
	// live process's write in progress failed its Put (found when a second
	// node started while the first was writing).
	if ents, err := os.ReadDir(filepath.Join(abs, ".tmp")); err == nil {
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleTmpAge {
				os.RemoveAll(filepath.Join(abs, ".tmp", e.Name()))
			}
		}
	}
	return &Local{root: abs}, nil
}

func (l *Local) String() string { return l.root }

func (l *Local) path(key string) string { return filepath.Join(l.root, filepath.FromSlash(key)) }
func (l *Local) sumPath(key string) string {
	return filepath.Join(l.root, ".sha256", filepath.FromSlash(key))
}

// wrap turns an error into an *UnavailableError when the root is gone.
func (l *Local) wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	if _, serr := os.Stat(filepath.Join(l.root, ".sha256")); serr != nil {
		// Not the cause's ErrNotFound: the object may well be there.
		return &UnavailableError{Store: l.String(), Op: op, Key: key, Err: fmt.Errorf("the directory is gone (%v)", err)}
	}
	return err
}

func (l *Local) Put(ctx context.Context, key string, r io.Reader, size int64, want Digest) (info Info, err error) {
	tmp, err := os.CreateTemp(filepath.Join(l.root, ".tmp"), "put-*")
	if err != nil {
		return Info{}, l.wrap("put", key, fmt.Errorf("creating temporary file: %w", err))
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	vr := newVerifyReader(ctxReader{ctx, r}, size, want)
	n, err := io.Copy(tmp, vr)
	if err != nil {
		return Info{}, l.wrap("put", key, err)
	}
	if err := tmp.Chmod(0o444); err != nil {
		return Info{}, err
	}
	if err := tmp.Sync(); err != nil {
		return Info{}, l.wrap("put", key, err)
	}
	if err := tmp.Close(); err != nil {
		return Info{}, l.wrap("put", key, err)
	}
	dst := l.path(key)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return Info{}, l.wrap("put", key, err)
	}
	// The digest first: a crash between the two renames leaves a digest
	// that does not match the old object, which Get reports, never a new
	// object without its digest.
	l.mu.Lock()
	err = writeFileAtomic(l.sumPath(key), []byte(want.String()+"\n"), filepath.Join(l.root, ".tmp"))
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	l.mu.Unlock()
	if err != nil {
		return Info{}, l.wrap("put", key, err)
	}
	syncDir(filepath.Dir(dst))
	fi, err := os.Stat(dst)
	if err != nil {
		return Info{}, l.wrap("put", key, err)
	}
	return Info{Key: key, Size: n, Digest: want, Modified: fi.ModTime()}, nil
}

func (l *Local) Stat(ctx context.Context, key string) (Info, error) {
	fi, err := os.Stat(l.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return Info{}, l.wrap("stat", key, fmt.Errorf("%w: %s", ErrNotFound, key))
	}
	if err != nil {
		return Info{}, l.wrap("stat", key, err)
	}
	if !fi.Mode().IsRegular() {
		return Info{}, fmt.Errorf("%w: %s (a directory)", ErrNotFound, key)
	}
	b, err := os.ReadFile(l.sumPath(key))
	if err != nil {
		return Info{}, l.wrap("stat", key, fmt.Errorf("reading the digest of %s: %w", key, err))
	}
	d, err := ParseDigest(strings.TrimSpace(string(b)))
	if err != nil {
		return Info{}, fmt.Errorf("digest of %s: %w", key, err)
	}
	return Info{Key: key, Size: fi.Size(), Digest: d, Modified: fi.ModTime()}, nil
}

func (l *Local) Open(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	info, err := l.Stat(ctx, key)
	if err != nil {
		return nil, Info{}, err
	}
	f, err := os.Open(l.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, Info{}, l.wrap("get", key, fmt.Errorf("%w: %s", ErrNotFound, key))
	}
	if err != nil {
		return nil, Info{}, l.wrap("get", key, err)
	}
	return f, info, nil
}

func (l *Local) Delete(ctx context.Context, key string) error {
	if err := os.Remove(l.path(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return l.wrap("delete", key, err)
	}
	if err := os.Remove(l.sumPath(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return l.wrap("delete", key, err)
	}
	if _, err := os.Stat(filepath.Join(l.root, ".sha256")); err != nil {
		return l.wrap("delete", key, err)
	}
	return nil
}

func (l *Local) List(ctx context.Context, prefix string) ([]Info, error) {
	var out []Info
	// Walk from the deepest directory the prefix names.
	start := l.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		start = l.path(prefix[:i])
	}
	if _, err := os.Stat(filepath.Join(l.root, ".sha256")); err != nil {
		return nil, l.wrap("list", prefix, err)
	}
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == start {
				return filepath.SkipAll
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(l.root, p)
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			if p != l.root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(key, prefix) || !d.Type().IsRegular() {
			return nil
		}
		info, err := l.Stat(ctx, key)
		if errors.Is(err, ErrNotFound) { // deleted meanwhile
			return nil
		}
		if err != nil {
			return err
		}
		out = append(out, info)
		return nil
	})
	if err != nil {
		return nil, l.wrap("list", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (l *Local) Check(ctx context.Context) error { return checkRoundTrip(ctx, l) }

// checkRoundTrip writes a small object of a random key to b and removes it.
func checkRoundTrip(ctx context.Context, b Backend) error {
	r := make([]byte, 8)
	rand.Read(r)
	data := []byte("airlock artifact store check\n")
	key := "check-" + hex.EncodeToString(r)
	if _, err := b.Put(ctx, key, bytes.NewReader(data), int64(len(data)), DigestOf(data)); err != nil {
		return fmt.Errorf("artifact store %s: writing a test object: %w", b, err)
	}
	if err := b.Delete(ctx, key); err != nil {
		return fmt.Errorf("artifact store %s: removing the test object: %w", b, err)
	}
	return nil
}

// ctxReader ends a copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// writeFileAtomic writes data to a temporary file in tmpDir and renames it
// to dst.
func writeFileAtomic(dst string, data []byte, tmpDir string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(tmpDir, "meta-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), dst)
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
