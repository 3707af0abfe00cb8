//go:build linux

package filesystem

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ErrXattrsUnsupported reports that a file's filesystem cannot store user
// extended attributes (EOPNOTSUPP), so it cannot hold file metadata.
var ErrXattrsUnsupported = errors.New("filesystem does not support user extended attributes")

var defaultStore atomic.Pointer[MetadataStore]

func init() { defaultStore.Store(NewMetadataStore()) }

// DefaultMetadataStore returns the process-wide store the Filesystem service
// and the /files handler share (captured by their constructors).
func DefaultMetadataStore() *MetadataStore { return defaultStore.Load() }

// SetDefaultMetadataStore replaces the process-wide store (tests) and
// returns the previous one. Services created before the call keep the store
// they captured.
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

// noXattrs behaves like a filesystem without user xattrs (ramfs): an empty
// list, and EOPNOTSUPP for get and set.
var noXattrs = xattrFuncs{
	list: func(string, []byte) (int, error) { return 0, nil },
	get:  func(string, string, []byte) (int, error) { return 0, unix.EOPNOTSUPP },
	fset: func(int, string, []byte, int) error { return unix.EOPNOTSUPP },
}

// MetadataStoreOption configures a MetadataStore.
type MetadataStoreOption func(*MetadataStore)

// WithoutXattrs makes the store act as if no filesystem supported user
// extended attributes.
func WithoutXattrs() MetadataStoreOption {
	return func(s *MetadataStore) { s.xattrs = noXattrs }
}

// MetadataStore reads and writes file metadata (the `X-Metadata-*` map) as
// user.e2b.<key> extended attributes, which move, link and vanish with their
// inode. (Under gVisor 20221219 the root filesystem refused user xattrs and
// a fallback store of JSON entries per inode stood in; the pinned runsc
// stores them, see internal/runtime/gvisor/doc.go, "gVisor specifics".)
type MetadataStore struct {
	xattrs xattrFuncs
}

// NewMetadataStore returns a store over the real xattr system calls.
func NewMetadataStore(opts ...MetadataStoreOption) *MetadataStore {
	s := &MetadataStore{xattrs: realXattrs}
	for _, o := range opts {
		o(s)
	}
	return s
}

// ReadMetadata returns the metadata of path (following symlinks) from the
// default store. See MetadataStore.Read.
func ReadMetadata(path string) (map[string]string, error) {
	return DefaultMetadataStore().Read(path)
}

// Read returns the metadata of path (following symlinks): its user.e2b.*
// extended attributes with the prefix stripped. No metadata (or a
// filesystem without user xattrs) is an empty (nil) map, not an error.
func (s *MetadataStore) Read(path string) (map[string]string, error) {
	return s.read(path, nil)
}

// read is Read; fi (unused) keeps the call sites' shape.
func (s *MetadataStore) read(path string, _ fs.FileInfo) (map[string]string, error) {
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
// wrapping ErrXattrsUnsupported when the filesystem refuses user xattrs.
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
