//go:build linux

package filesystem

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// DefaultMetadataDir is where the fallback metadata store keeps its entries
// (root-only) when the filesystem has no user extended attributes, as with
// the 9p/gofer root filesystem of gVisor sandboxes.
const DefaultMetadataDir = "/var/lib/airlock-envd/metadata"

// ErrXattrsUnsupported reports that a file's filesystem cannot store user
// extended attributes (EOPNOTSUPP); the fallback store is used instead.
var ErrXattrsUnsupported = errors.New("filesystem does not support user extended attributes")

var defaultStore atomic.Pointer[MetadataStore]

func init() { defaultStore.Store(NewMetadataStore(DefaultMetadataDir)) }

// DefaultMetadataStore returns the process-wide store the Filesystem service
// and the /files handler share (captured by their constructors).
func DefaultMetadataStore() *MetadataStore { return defaultStore.Load() }

// SetDefaultMetadataStore replaces the process-wide store (tests, or a
// different directory) and returns the previous one. Services created
// before the call keep the store they captured.
func SetDefaultMetadataStore(s *MetadataStore) (previous *MetadataStore) {
	return defaultStore.Swap(s)
}

// xattrFuncs are the extended-attribute system calls, injectable so tests
// can simulate a filesystem without user xattrs.
type xattrFuncs struct {
	list func(path string, dest []byte) (int, error)
	get  func(path, attr string, dest []byte) (int, error)
	fset func(fd int, attr string, data []byte, flags int) error
}

var realXattrs = xattrFuncs{list: unix.Listxattr, get: unix.Getxattr, fset: unix.Fsetxattr}

// noXattrs behaves like gVisor's gofer and ramfs: an empty list, and
// EOPNOTSUPP for get and set.
var noXattrs = xattrFuncs{
	list: func(string, []byte) (int, error) { return 0, nil },
	get:  func(string, string, []byte) (int, error) { return 0, unix.EOPNOTSUPP },
	fset: func(int, string, []byte, int) error { return unix.EOPNOTSUPP },
}

// MetadataStoreOption configures a MetadataStore.
type MetadataStoreOption func(*MetadataStore)

// WithoutXattrs makes the store act as if no filesystem supported user
// extended attributes, so all metadata goes to the fallback directory.
func WithoutXattrs() MetadataStoreOption {
	return func(s *MetadataStore) { s.xattrs = noXattrs }
}

// MetadataStore reads and writes file metadata (the `X-Metadata-*` map).
// Extended attributes (user.e2b.<key>) are the first choice; where the
// filesystem refuses them, a JSON entry per file lives in a root-only
// directory, keyed by the file's (st_dev, st_ino) so renames keep it.
//
// Each entry records the file's size, mtime, ctime and (where the
// filesystem reports one) birth time when it was written. An entry is
// trusted only while the birth time matches, or else the ctime is unchanged
// or the size and mtime are (renames, chmod, chown and links keep them);
// anything else means the inode now holds a different file (or was
// rewritten in place by another process) and the entry is dropped.
//
// Entries are cached in memory (loaded once, lazily). All store file I/O
// runs on a fresh goroutine, never on a thread that identity.RunAs switched
// to another user, so the root-only directory stays reachable from inside
// RunAs callbacks.
type MetadataStore struct {
	dir     string
	xattrs  xattrFuncs
	noBtime bool // tests: ignore birth times, as on gVisor
	log     *slog.Logger

	// mu guards loaded, entries and dirReady, and serialises writes to dir.
	mu       sync.Mutex
	loaded   bool
	entries  map[fileKey]*metaEntry
	dirReady bool
}

// NewMetadataStore returns a store whose fallback entries live in dir
// (created 0700 on first write).
func NewMetadataStore(dir string, opts ...MetadataStoreOption) *MetadataStore {
	s := &MetadataStore{dir: dir, xattrs: realXattrs, log: slog.Default().With("component", "metadata-store")}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Dir returns the fallback directory.
func (s *MetadataStore) Dir() string { return s.dir }

type fileKey struct{ dev, ino uint64 }

func (k fileKey) fileName() string { return fmt.Sprintf("%x-%x.json", k.dev, k.ino) }

// fileID is what the store knows about a file from stat.
type fileID struct {
	key          fileKey
	size         int64
	mtime, ctime int64 // ns
	btime        int64 // ns, 0 when unknown
	nlink        uint64
}

// metaEntry is one stored entry (also its on-disk JSON form).
type metaEntry struct {
	Dev      uint64            `json:"dev"`
	Ino      uint64            `json:"ino"`
	Path     string            `json:"path"`
	Size     int64             `json:"size"`
	MtimeNs  int64             `json:"mtime_ns"`
	CtimeNs  int64             `json:"ctime_ns"`
	BtimeNs  int64             `json:"btime_ns,omitempty"`
	Metadata map[string]string `json:"metadata"`
}

func (e *metaEntry) key() fileKey { return fileKey{e.Dev, e.Ino} }

// matches reports whether id is still the file the entry was written for.
func (e *metaEntry) matches(id fileID) bool {
	if e.BtimeNs != 0 && id.btime != 0 {
		return e.BtimeNs == id.btime
	}
	if e.CtimeNs == id.ctime {
		return true
	}
	return e.MtimeNs == id.mtime && e.Size == id.size
}

func statID(fi fs.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{
		key:   fileKey{dev: st.Dev, ino: st.Ino},
		size:  st.Size,
		mtime: st.Mtim.Nano(),
		ctime: st.Ctim.Nano(),
		nlink: uint64(st.Nlink),
	}, true
}

// birthTime returns the birth time (ns) of the file at dirfd/path, 0 when
// the filesystem does not report one (gVisor claims STATX_BTIME but
// returns zero).
func (s *MetadataStore) birthTime(dirfd int, path string, flags int) int64 {
	if s.noBtime {
		return 0
	}
	var sx unix.Statx_t
	if err := unix.Statx(dirfd, path, flags, unix.STATX_BTIME, &sx); err != nil || sx.Mask&unix.STATX_BTIME == 0 {
		return 0
	}
	return sx.Btime.Sec*1e9 + int64(sx.Btime.Nsec)
}

// asRoot runs fn on a new goroutine. identity.RunAs locks its goroutine to
// a thread with switched credentials and discards that thread; a fresh
// goroutine never runs there (and Go creates new threads from a clean
// template), so fn has the agent's own (root) credentials.
func asRoot(fn func() error) error {
	errc := make(chan error, 1)
	go func() { errc <- fn() }()
	return <-errc
}

// ReadMetadata returns the metadata of path (following symlinks) from the
// default store. See MetadataStore.Read.
func ReadMetadata(path string) (map[string]string, error) {
	return DefaultMetadataStore().Read(path)
}

// Read returns the metadata of path (following symlinks): its user.e2b.*
// extended attributes with the prefix stripped or, when it has none, its
// fallback entry. Like getxattr, the fallback needs read permission for the
// calling thread's (possibly RunAs-switched) credentials. No metadata is an
// empty (nil) map, not an error.
func (s *MetadataStore) Read(path string) (map[string]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	return s.read(path, fi)
}

// read is Read with path's stat result (following symlinks) already known.
func (s *MetadataStore) read(path string, fi fs.FileInfo) (map[string]string, error) {
	md, err := s.readXattrs(path)
	if err != nil || len(md) > 0 {
		return md, err
	}
	id, ok := statID(fi)
	if !ok {
		return nil, nil
	}
	if !s.mayHave(id.key) {
		return nil, nil
	}
	if err := unix.Faccessat(unix.AT_FDCWD, path, unix.R_OK, unix.AT_EACCESS); err != nil {
		return nil, nil // getxattr would have failed with EACCES
	}
	id.btime = s.birthTime(unix.AT_FDCWD, path, 0)
	return s.lookup(id, path), nil
}

// readXattrs lists the user.e2b.* attributes; unsupported means none.
func (s *MetadataStore) readXattrs(path string) (map[string]string, error) {
	size, err := s.xattrs.list(path, nil)
	if err != nil {
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing xattrs of %s: %w", path, err)
	}
	if size == 0 {
		return nil, nil
	}
	buf := make([]byte, size)
	size, err = s.xattrs.list(path, buf)
	if err != nil {
		return nil, fmt.Errorf("listing xattrs of %s: %w", path, err)
	}
	var out map[string]string
	for _, name := range strings.Split(string(buf[:size]), "\x00") {
		key, ok := strings.CutPrefix(name, MetadataXattrPrefix)
		if !ok || key == "" {
			continue
		}
		val, err := s.getxattr(path, name)
		if err != nil {
			continue // removed concurrently, or unreadable
		}
		if out == nil {
			out = map[string]string{}
		}
		out[key] = val
	}
	return out, nil
}

func (s *MetadataStore) getxattr(path, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := s.xattrs.get(path, name, buf)
		if errors.Is(err, unix.ERANGE) {
			sz, serr := s.xattrs.get(path, name, nil)
			if serr != nil {
				return "", fmt.Errorf("sizing xattr %s: %w", name, serr)
			}
			buf = make([]byte, sz)
			continue
		}
		if err != nil {
			return "", fmt.Errorf("reading xattr %s: %w", name, err)
		}
		return string(buf[:n]), nil
	}
}

// SetXattrs stores meta as user.e2b.* attributes of the open file f (which
// should carry no others, e.g. a fresh temp file). It returns an error
// wrapping ErrXattrsUnsupported when the filesystem refuses user xattrs;
// the caller then records meta with Remember once the file is final.
func (s *MetadataStore) SetXattrs(f *os.File, meta map[string]string) error {
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fd := int(f.Fd())
	for _, k := range keys {
		if err := s.xattrs.fset(fd, MetadataXattrPrefix+k, []byte(meta[k]), 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) {
				return fmt.Errorf("setting metadata %q: %w (%w)", k, ErrXattrsUnsupported, err)
			}
			return fmt.Errorf("setting metadata %q: %w", k, err)
		}
	}
	return nil
}

// Remember makes meta the fallback metadata of the open file f, whose
// current name is path: call it once the file is in place and will not be
// modified further by the caller. An empty meta drops any (stale) entry for
// f's inode. The store I/O runs as root.
func (s *MetadataStore) Remember(f *os.File, path string, meta map[string]string) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	id, ok := statID(fi)
	if !ok {
		return fmt.Errorf("stat %s: no inode information", path)
	}
	if len(meta) == 0 {
		if s.mayHave(id.key) {
			s.drop(id.key)
		}
		return nil
	}
	id.btime = s.birthTime(int(f.Fd()), "", unix.AT_EMPTY_PATH)
	md := make(map[string]string, len(meta))
	for k, v := range meta {
		md[k] = v
	}
	e := &metaEntry{Dev: id.key.dev, Ino: id.key.ino, Path: path, Size: id.size,
		MtimeNs: id.mtime, CtimeNs: id.ctime, BtimeNs: id.btime, Metadata: md}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.loadLocked(); err != nil {
		return err
	}
	if err := asRoot(func() error { return s.persist(e) }); err != nil {
		return err
	}
	s.entries[e.key()] = e
	return nil
}

// Unlinked tells the store that the file described by fi (an lstat result
// taken before the name was removed or replaced) lost that name. Its entry
// is dropped when that was the last link.
func (s *MetadataStore) Unlinked(fi fs.FileInfo) {
	id, ok := statID(fi)
	if !ok || id.nlink > 1 || !fi.Mode().IsRegular() || !s.mayHave(id.key) {
		return
	}
	s.drop(id.key)
}

// removalCandidates returns the entries whose recorded path is p or lies
// below it and that the calling thread can confirm (lstat) are still the
// file there with a single link: the files a recursive removal of p takes
// with it. Call it as the acting user before removing.
func (s *MetadataStore) removalCandidates(p string) []fileKey {
	if !s.anyEntries() {
		return nil
	}
	s.mu.Lock()
	var cands []*metaEntry
	for _, e := range s.entries {
		if pathWithin(e.Path, p) {
			cands = append(cands, e)
		}
	}
	s.mu.Unlock()
	var out []fileKey
	for _, e := range cands {
		fi, err := os.Lstat(e.Path)
		if err != nil {
			continue
		}
		if id, ok := statID(fi); ok && id.key == e.key() && id.nlink <= 1 {
			out = append(out, e.key())
		}
	}
	return out
}

// moved records that src was renamed to dst: recorded paths at or below
// src are rewritten (entries stay valid anyway; paths only guide removal).
func (s *MetadataStore) moved(src, dst string) {
	if !s.anyEntries() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		if !pathWithin(e.Path, src) {
			continue
		}
		ne := *e
		ne.Path = dst + strings.TrimPrefix(e.Path, src)
		if err := asRoot(func() error { return s.persist(&ne) }); err != nil {
			s.log.Warn("updating metadata entry path", "path", ne.Path, "err", err)
			continue
		}
		s.entries[ne.key()] = &ne
	}
}

// lookup returns the metadata stored for id (read at path), dropping the
// entry if the inode now holds a different file.
func (s *MetadataStore) lookup(id fileID, path string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.loadLocked(); err != nil {
		s.log.Warn("loading metadata store", "err", err)
		return nil
	}
	e, ok := s.entries[id.key]
	if !ok {
		return nil
	}
	if !e.matches(id) {
		s.log.Debug("dropping stale metadata entry", "path", e.Path, "now", path)
		s.dropLocked(id.key)
		return nil
	}
	if e.Path != path {
		ne := *e
		ne.Path = path
		if err := asRoot(func() error { return s.persist(&ne) }); err == nil {
			s.entries[id.key] = &ne
			e = &ne
		}
	}
	out := make(map[string]string, len(e.Metadata))
	for k, v := range e.Metadata {
		out[k] = v
	}
	return out
}

// mayHave reports whether the store may hold an entry for k (loading the
// store on first use).
func (s *MetadataStore) mayHave(k fileKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.loadLocked(); err != nil {
		s.log.Warn("loading metadata store", "err", err)
		return false
	}
	_, ok := s.entries[k]
	return ok
}

func (s *MetadataStore) anyEntries() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.loadLocked(); err != nil {
		s.log.Warn("loading metadata store", "err", err)
		return false
	}
	return len(s.entries) > 0
}

func (s *MetadataStore) drop(k fileKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked(k)
}

func (s *MetadataStore) dropLocked(k fileKey) {
	if _, ok := s.entries[k]; !ok {
		return
	}
	delete(s.entries, k)
	err := asRoot(func() error {
		if err := os.Remove(filepath.Join(s.dir, k.fileName())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing metadata entry: %w", err)
		}
		return nil
	})
	if err != nil {
		s.log.Warn("dropping metadata entry", "err", err)
	}
}

// loadLocked reads every entry of dir once. A missing dir is an empty store.
func (s *MetadataStore) loadLocked() error {
	if s.loaded {
		return nil
	}
	entries := map[fileKey]*metaEntry{}
	err := asRoot(func() error {
		des, err := os.ReadDir(s.dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading metadata store %s: %w", s.dir, err)
		}
		for _, de := range des {
			name := de.Name()
			if !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") {
				if strings.HasPrefix(name, ".tmp-") {
					_ = os.Remove(filepath.Join(s.dir, name)) // interrupted write
				}
				continue
			}
			b, err := os.ReadFile(filepath.Join(s.dir, name))
			if err != nil {
				return fmt.Errorf("reading metadata entry %s: %w", name, err)
			}
			var e metaEntry
			if err := json.Unmarshal(b, &e); err != nil || e.key().fileName() != name {
				s.log.Warn("discarding corrupt metadata entry", "file", name, "err", err)
				_ = os.Remove(filepath.Join(s.dir, name))
				continue
			}
			entries[e.key()] = &e
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.entries, s.loaded = entries, true
	return nil
}

// persist writes e atomically (temp file + rename) into dir, creating dir
// 0700 if needed. Runs as root; the caller holds mu.
func (s *MetadataStore) persist(e *metaEntry) error {
	if !s.dirReady {
		if err := os.MkdirAll(s.dir, 0o700); err != nil {
			return fmt.Errorf("creating metadata store %s: %w", s.dir, err)
		}
		if err := os.Chmod(s.dir, 0o700); err != nil {
			return fmt.Errorf("securing metadata store %s: %w", s.dir, err)
		}
		s.dirReady = true
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encoding metadata entry: %w", err)
	}
	tmp, err := os.CreateTemp(s.dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("writing metadata entry: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing metadata entry: %w", err)
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing metadata entry: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(s.dir, e.key().fileName())); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing metadata entry: %w", err)
	}
	return nil
}
