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
	handleHeader  = 8
	maxVerifiers  = 1024
)

func newHandler(exps []Export, uid, gid int) (*handler, error) {
	if len(exps) > 255 {
		return nil, errors.New("nfs: at most 255 exports")
	}
	h := &handler{verifiers: map[uint64][]fs.FileInfo{}}
	for _, e := range exps {
		dir, err := filepath.EvalSymlinks(e.Dir)
		if err != nil {
			h.close()
			return nil, fmt.Errorf("nfs: export %s: %w", e.Name, err)
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			h.close()
			return nil, fmt.Errorf("nfs: export %s: %w", e.Name, err)
		}
		hf, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			root.Close()
			h.close()
			return nil, fmt.Errorf("nfs: export %s: %w", e.Name, err)
		}
		// File handles are the kernel's: a file system without them (a
		// FUSE mount such as a bucket volume's s3fs) cannot be served.
		if _, _, err := unix.NameToHandleAt(int(hf.Fd()), "", unix.AT_EMPTY_PATH); err != nil {
			hf.Close()
			root.Close()
			h.close()
			return nil, fmt.Errorf("nfs: export %s: the file system of %s gives no file handles: %w", e.Name, dir, err)
		}
		h.exports = append(h.exports, &export{Export: e, dir: dir, handle: hf,
			fs: &rootFS{root: root, uid: uid, gid: gid, readOnly: e.ReadOnly}})
	}
	return h, nil
}

func (h *handler) close() {
	for _, e := range h.exports {
		e.fs.root.Close()
		e.handle.Close()
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
