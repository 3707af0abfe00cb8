//go:build linux

package nfs

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	billy "github.com/go-git/go-billy/v5"
	gonfs "github.com/willscott/go-nfs"
	"golang.org/x/sys/unix"
)

// Export is one volume a server exports.
type Export struct {
	// Name is the export path the guest mounts ("/<volume id>").
	Name string
	// Dir is the volume's host directory.
	Dir      string
	ReadOnly bool
}

// ExportError is an export the server cannot serve (its directory is
// missing, or its file system refuses what the server needs): a fault of
// the volume. Index is the export's index in Listen's exps.
type ExportError struct {
	Index int
	Name  string
	Err   error
}

func (e *ExportError) Error() string { return fmt.Sprintf("nfs: export %s: %v", e.Name, e.Err) }

func (e *ExportError) Unwrap() error { return e.Err }

// export is an Export opened for serving.
type export struct {
	Export
	fs     *rootFS
	dir    string   // Dir with symbolic links resolved: what /proc/self/fd shows
	handle *os.File // Dir, opened: the mount for open_by_handle_at (not O_PATH, which it refuses)
}

// handler is go-nfs's Handler for a set of exports. File handles are the
// kernel's own (name_to_handle_at, as knfsd uses): they survive a restart
// of the server, so a guest restored from a snapshot, a fork child and a
// guest of a restarted daemon keep using the handles their NFS client
// holds. A handle is only a hint to find a path: the path it opens is
// checked to lie inside the export, and every operation then goes through
// the export's os.Root.
type handler struct {
	exports []*export

	mu        sync.Mutex
	verifiers map[uint64][]fs.FileInfo
	order     []uint64
}

const (
	handleVersion = 1
	// A path-table handle: [version, export index, 0, 0, id].
	tableHandleVersion = 2
	tableHandleLen     = 4 + idLen
	handleHeader       = 8
	maxVerifiers       = 1024
)

// newHandler opens exps. stateDir, if set, keeps the path tables of the
// exports whose file system has no handles ("nfs-handles-<index>").
func newHandler(exps []Export, uid, gid int, stateDir string) (*handler, error) {
	if len(exps) > 255 {
		return nil, errors.New("nfs: at most 255 exports")
	}
	h := &handler{verifiers: map[uint64][]fs.FileInfo{}}
	for i, e := range exps {
		dir, err := filepath.EvalSymlinks(e.Dir)
		if err != nil {
			h.close()
			return nil, &ExportError{Index: i, Name: e.Name, Err: err}
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			h.close()
			return nil, &ExportError{Index: i, Name: e.Name, Err: err}
		}
		hf, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			root.Close()
			h.close()
			return nil, &ExportError{Index: i, Name: e.Name, Err: err}
		}
		fs := &rootFS{root: root, uid: uid, gid: gid, readOnly: e.ReadOnly}
		// File handles are the kernel's where the file system has durable
		// ones; a FUSE mount such as a bucket volume's s3fs does not, and
		// gets a path table (pathtable_linux.go).
		if err := kernelHandles(hf); err != nil {
			if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EOVERFLOW) && !errors.Is(err, errFUSE) {
				hf.Close()
				root.Close()
				h.close()
				return nil, &ExportError{Index: i, Name: e.Name, Err: fmt.Errorf("file handles of %s: %w", dir, err)}
			}
			file := ""
			if stateDir != "" {
				file = filepath.Join(stateDir, "nfs-handles-"+strconv.Itoa(i))
			}
			fs.table, err = openPathTable(file)
			if err != nil {
				hf.Close()
				root.Close()
				h.close()
				return nil, &ExportError{Index: i, Name: e.Name, Err: err}
			}
		}
		h.exports = append(h.exports, &export{Export: e, dir: dir, handle: hf, fs: fs})
	}
	return h, nil
}

// errFUSE: a FUSE file system's handles are not durable.
var errFUSE = errors.New("a FUSE file system's handles do not outlive its inodes")

// kernelHandles says whether f's file system gives durable file handles (a
// variable for the tests, which have no FUSE mount). A FUSE mount (a bucket
// volume's s3fs) encodes handles, but they name the daemon's node ids: one
// whose inode the host kernel has evicted is stale (s3fs does not offer
// FUSE's export support), and a remounted s3fs has new ids.
var kernelHandles = func(f *os.File) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return err
	}
	if st.Type == unix.FUSE_SUPER_MAGIC {
		return errFUSE
	}
	_, _, err := unix.NameToHandleAt(int(f.Fd()), "", unix.AT_EMPTY_PATH)
	return err
}

func (h *handler) close() {
	for _, e := range h.exports {
		e.fs.root.Close()
		e.handle.Close()
		if e.fs.table != nil {
			_ = e.fs.table.close()
		}
	}
}

func (h *handler) Mount(_ context.Context, _ net.Conn, req gonfs.MountRequest) (gonfs.MountStatus, billy.Filesystem, []gonfs.AuthFlavor) {
	name := "/" + strings.Trim(string(req.Dirpath), "/")
	for _, e := range h.exports {
		if e.Name == name {
			return gonfs.MountStatusOk, e.fs, []gonfs.AuthFlavor{gonfs.AuthFlavorNull}
		}
	}
	return gonfs.MountStatusErrNoEnt, nil, nil
}

func (h *handler) Change(f billy.Filesystem) billy.Change {
	if r, ok := f.(*rootFS); ok && !r.readOnly {
		return r
	}
	return nil
}

func (h *handler) FSStat(_ context.Context, f billy.Filesystem, s *gonfs.FSStat) error {
	e := h.exportOf(f)
	if e == nil {
		return errors.New("nfs: unknown file system")
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(e.handle.Fd()), &st); err != nil {
		return fmt.Errorf("statfs %s: %w", e.Name, err)
	}
	bs := uint64(st.Bsize)
	s.TotalSize, s.FreeSize, s.AvailableSize = st.Blocks*bs, st.Bfree*bs, st.Bavail*bs
	s.TotalFiles, s.FreeFiles, s.AvailableFiles = st.Files, st.Ffree, st.Ffree
	return nil
}

func (h *handler) exportOf(f billy.Filesystem) *export {
	for _, e := range h.exports {
		if billy.Filesystem(e.fs) == f {
			return e
		}
	}
	return nil
}

// ToHandle encodes [version, export index, kernel handle length, 0,
// handle type (4 bytes), kernel handle, zero padding to a multiple of 4].
// The padding matters: go-nfs reads a handle as XDR opaque without
// skipping its padding, so a handle of another length garbles the
// arguments after it. The last path element is never followed (no
// AT_SYMLINK_FOLLOW); its directory is opened through the os.Root.
func (h *handler) ToHandle(f billy.Filesystem, p []string) []byte {
	idx := -1
	for i, e := range h.exports {
		if billy.Filesystem(e.fs) == f {
			idx = i
		}
	}
	if idx < 0 {
		return nil
	}
	e := h.exports[idx]
	if e.fs.table != nil {
		id, err := e.fs.table.id(strings.Join(p, "/"))
		if err != nil {
			return nil
		}
		b := make([]byte, tableHandleLen)
		b[0], b[1] = tableHandleVersion, byte(idx)
		copy(b[4:], id[:])
		return b
	}
	var fh unix.FileHandle
	var err error
	if len(p) == 0 {
		fh, _, err = unix.NameToHandleAt(int(e.handle.Fd()), "", unix.AT_EMPTY_PATH)
	} else {
		var d *os.File
		d, err = e.fs.root.Open(rel(strings.Join(p[:len(p)-1], "/")))
		if err == nil {
			fh, _, err = unix.NameToHandleAt(int(d.Fd()), p[len(p)-1], 0) // 0: the last element is not followed
			d.Close()
		}
	}
	if err != nil {
		return nil
	}
	kb := fh.Bytes()
	n := handleHeader + len(kb)
	n += (4 - n%4) % 4
	if n > gonfs.FHSize {
		return nil
	}
	b := make([]byte, n)
	b[0], b[1], b[2] = handleVersion, byte(idx), byte(len(kb))
	binary.LittleEndian.PutUint32(b[4:], uint32(fh.Type()))
	copy(b[handleHeader:], kb)
	return b
}

var errStale = &gonfs.NFSStatusError{NFSStatus: gonfs.NFSStatusStale}

// FromHandle finds the path of a handle: open_by_handle_at on the export's
// file system, then the path the kernel gives that descriptor, which must be
// the export's directory or below it (a forged handle naming another file
// of the same file system is stale).
func (h *handler) FromHandle(b []byte) (billy.Filesystem, []string, error) {
	if len(b) == tableHandleLen && b[0] == tableHandleVersion {
		return h.fromTableHandle(b)
	}
	if len(b) < handleHeader || b[0] != handleVersion || int(b[1]) >= len(h.exports) ||
		handleHeader+int(b[2]) > len(b) {
		return nil, nil, errStale
	}
	e := h.exports[b[1]]
	fh := unix.NewFileHandle(int32(binary.LittleEndian.Uint32(b[4:])), b[handleHeader:handleHeader+int(b[2])])
	fd, err := unix.OpenByHandleAt(int(e.handle.Fd()), fh, unix.O_PATH)
	if err != nil {
		return nil, nil, errStale
	}
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	unix.Close(fd)
	if err != nil {
		return nil, nil, errStale
	}
	if p == e.dir {
		return e.fs, []string{}, nil
	}
	r, ok := strings.CutPrefix(p, e.dir+"/")
	if !ok || strings.HasSuffix(r, " (deleted)") {
		return nil, nil, errStale
	}
	return e.fs, strings.Split(r, "/"), nil
}

// fromTableHandle finds the path of a path-table handle: an id the
// export's table holds, for a path that exists (looked up through the
// export's os.Root, as every later operation on it).
func (h *handler) fromTableHandle(b []byte) (billy.Filesystem, []string, error) {
	if int(b[1]) >= len(h.exports) || b[2] != 0 || b[3] != 0 {
		return nil, nil, errStale
	}
	e := h.exports[b[1]]
	if e.fs.table == nil {
		return nil, nil, errStale
	}
	var id handleID
	copy(id[:], b[4:])
	p, ok := e.fs.table.path(id)
	if !ok || !localPath(p) {
		return nil, nil, errStale
	}
	if _, err := e.fs.root.Lstat(p); err != nil {
		return nil, nil, errStale
	}
	if p == "." {
		return e.fs, []string{}, nil
	}
	return e.fs, strings.Split(p, "/"), nil
}

// InvalidateHandle does nothing: go-nfs calls it after a rename and a
// remove, which the export's path table (if any) has followed already
// (rootFS.Rename, rootFS.Remove), keeping a renamed file's handle.
func (h *handler) InvalidateHandle(billy.Filesystem, []byte) error { return nil }

func (h *handler) HandleLimit() int { return 1 << 30 }

// VerifierFor and DataForVerifier keep a directory listing for READDIR's
// cookie verifier (go-nfs's CachingHandler), bounded.
func (h *handler) VerifierFor(p string, contents []fs.FileInfo) uint64 {
	s := sha256.New()
	s.Write([]byte(p))
	for _, c := range contents {
		s.Write([]byte{0})
		s.Write([]byte(c.Name()))
	}
	id := binary.BigEndian.Uint64(s.Sum(nil))
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.verifiers[id]; !ok {
		h.order = append(h.order, id)
		if len(h.order) > maxVerifiers {
			delete(h.verifiers, h.order[0])
			h.order = h.order[1:]
		}
	}
	h.verifiers[id] = contents
	return id
}

func (h *handler) DataForVerifier(_ string, id uint64) []fs.FileInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.verifiers[id]
}
