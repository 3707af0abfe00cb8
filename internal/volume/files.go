package volume

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Errors of Files besides fs.ErrNotExist and fs.ErrExist (the API maps
// each to a status and a string code).
var (
	// ErrInvalidPath is a path the content API refuses: empty, with a NUL,
	// with a ".." component, or (for a remove) the volume's root.
	ErrInvalidPath = errors.New("invalid path")
	// ErrEscapes is a path that resolves outside the volume (through a
	// symbolic link); os.Root refused to follow it.
	ErrEscapes = errors.New("path leads outside the volume")
	// ErrIsDir is a file operation on a directory.
	ErrIsDir = errors.New("is a directory")
	// ErrNotDir is a directory operation on something else.
	ErrNotDir = errors.New("not a directory")
	// ErrFull is a write past the volume's size limit or its filesystem's
	// free space.
	ErrFull = errors.New("volume is full")
)

// Entry is one file's metadata as E2B's VolumeEntryStat.
type Entry struct {
	Name   string    `json:"name"`
	Type   string    `json:"type"` // "file" | "directory" | "symlink" | "unknown"
	Path   string    `json:"path"` // absolute in the volume, "/" for its root
	Size   int64     `json:"size"`
	Mode   uint32    `json:"mode"` // permission bits (and setuid, setgid, sticky)
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	Atime  time.Time `json:"atime"`
	Mtime  time.Time `json:"mtime"`
	Ctime  time.Time `json:"ctime"`
	Target string    `json:"target,omitempty"` // a symlink's target
}

// Owner is the owner and mode a write or a makeDir gives what it creates
// (and a metadata update sets): nil fields keep the default (or, for an
// update, the current value).
type Owner struct {
	UID, GID, Mode *uint32
}

// CleanPath turns a content API path ("/a/b", "a//b/", "/") into the name
// of the file under the volume's root ("a/b", "." for the root) and its
// absolute form ("/a/b"). It refuses an empty path, a NUL and any ".."
// component (ErrInvalidPath): a path names a file of the volume, never a
// way around it.
func CleanPath(p string) (rel, abs string, err error) {
	if p == "" {
		return "", "", fmt.Errorf("%w: path is required", ErrInvalidPath)
	}
	if strings.ContainsRune(p, 0) {
		return "", "", fmt.Errorf("%w: path contains a NUL character", ErrInvalidPath)
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", "", fmt.Errorf("%w: path %q has a '..' component", ErrInvalidPath, p)
		}
	}
	abs = path.Clean("/" + p)
	if abs == "/" {
		return ".", abs, nil
	}
	return abs[1:], abs, nil
}

// Files is one volume's file tree, every name resolved in an os.Root: no
// "..", symbolic link or absolute link takes an operation outside it.
type Files struct {
	root *os.Root
}

// OpenFiles opens the volume whose data directory is dir.
func OpenFiles(dir string) (*Files, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("opening volume directory: %w", err)
	}
	return &Files{root: r}, nil
}

// Close releases the root.
func (f *Files) Close() error { return f.root.Close() }

// classify maps os.Root's refusal to leave the root to ErrEscapes (the
// error has no exported identity) and ENOTDIR in a path to ErrNotExist.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if strings.Contains(err.Error(), "path escapes from parent") {
		return fmt.Errorf("%w (%v)", ErrEscapes, err)
	}
	if errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("%w (%v)", fs.ErrNotExist, err)
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w (%v)", ErrFull, err)
	}
	return err
}

// entry describes the file rel (abs) from its lstat info.
func (f *Files) entry(rel, abs string, info fs.FileInfo) Entry {
	e := Entry{Path: abs, Name: path.Base(abs), Size: info.Size(), Mode: uint32(info.Mode().Perm()), Mtime: info.ModTime().UTC()}
	if abs == "/" {
		e.Name = "/"
	}
	m := info.Mode()
	if m&fs.ModeSetuid != 0 {
		e.Mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		e.Mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		e.Mode |= 0o1000
	}
	switch {
	case m.IsRegular():
		e.Type = "file"
	case m.IsDir():
		e.Type = "directory"
	case m&fs.ModeSymlink != 0:
		e.Type = "symlink"
		e.Target, _ = f.root.Readlink(rel)
	default:
		e.Type = "unknown"
	}
	e.Atime, e.Ctime = e.Mtime, e.Mtime
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		e.UID, e.GID = st.Uid, st.Gid
		e.Atime = time.Unix(st.Atim.Unix()).UTC()
		e.Ctime = time.Unix(st.Ctim.Unix()).UTC()
	}
	return e
}

// Stat describes p without following a final symbolic link.
func (f *Files) Stat(p string) (Entry, error) {
	rel, abs, err := CleanPath(p)
	if err != nil {
		return Entry{}, err
	}
	info, err := f.root.Lstat(rel)
	if err != nil {
		return Entry{}, classify(err)
	}
	return f.entry(rel, abs, info), nil
}

// List describes the entries of directory p, and of its subdirectories
// down to depth levels (depth < 1 means 1), sorted by path; symbolic
// links are listed, not followed.
func (f *Files) List(p string, depth int) ([]Entry, error) {
	rel, abs, err := CleanPath(p)
	if err != nil {
		return nil, err
	}
	info, err := f.root.Stat(rel)
	if err != nil {
		return nil, classify(err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("%s: %w", abs, ErrNotDir)
	}
	if depth < 1 {
		depth = 1
	}
	var out []Entry
	if err := f.list(rel, abs, depth, &out); err != nil {
		return nil, err
	}
	return out, nil
}

func (f *Files) list(rel, abs string, depth int, out *[]Entry) error {
	d, err := f.root.Open(rel)
	if err != nil {
		return classify(err)
	}
	ents, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return classify(err)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, de := range ents {
		info, err := de.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile
		} else if err != nil {
			return classify(err)
		}
		crel, cabs := path.Join(rel, de.Name()), path.Join(abs, de.Name())
		*out = append(*out, f.entry(crel, cabs, info))
		if de.IsDir() && depth > 1 {
			if err := f.list(crel, cabs, depth-1, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// setOwner applies o (nil fields: the defaults given) to rel without
// following a final symbolic link for the owner.
func (f *Files) setOwner(rel string, o Owner, defUID, defGID, defMode uint32) error {
	uid, gid, mode := defUID, defGID, defMode
	if o.UID != nil {
		uid = *o.UID
	}
	if o.GID != nil {
		gid = *o.GID
	}
	if o.Mode != nil {
		mode = *o.Mode
	}
	if err := f.root.Lchown(rel, int(uid), int(gid)); err != nil {
		return classify(err)
	}
	return classify(f.root.Chmod(rel, fileMode(mode)))
}

// fileMode converts a Unix mode's low 12 bits to an fs.FileMode.
func fileMode(m uint32) fs.FileMode {
	fm := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		fm |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		fm |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		fm |= fs.ModeSticky
	}
	return fm
}

// Defaults for what the content API creates (E2B's orchestrator's modes;
// the owner is the sandboxes' user, uid and gid 1000).
const (
	DefaultUID      = 1000
	DefaultGID      = 1000
	DefaultFileMode = 0o666
	DefaultDirMode  = 0o777
)

// mkdirs creates every missing directory of rel's components (rel itself
// included), each owned and moded as o says.
func (f *Files) mkdirs(rel string, o Owner) error {
	if rel == "." {
		return nil
	}
	cur := ""
	for _, c := range strings.Split(rel, "/") {
		cur = path.Join(cur, c)
		info, err := f.root.Stat(cur)
		if err == nil {
			if !info.IsDir() {
				return fmt.Errorf("/%s: %w", cur, ErrNotDir)
			}
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return classify(err)
		}
		if err := f.root.Mkdir(cur, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return classify(err)
		}
		if err := f.setOwner(cur, o, DefaultUID, DefaultGID, DefaultDirMode); err != nil {
			return err
		}
	}
	return nil
}

// MakeDir creates directory p. Without force its parent must exist
// (fs.ErrNotExist) and p must not (fs.ErrExist); with force the missing
// parents are created too and an existing directory is no error. o sets
// the owner and mode of what it creates.
func (f *Files) MakeDir(p string, o Owner, force bool) (Entry, error) {
	rel, _, err := CleanPath(p)
	if err != nil {
		return Entry{}, err
	}
	if info, err := f.root.Lstat(rel); err == nil {
		if info.IsDir() && force {
			return f.Stat(p)
		}
		return Entry{}, fmt.Errorf("%s: %w", p, fs.ErrExist)
	}
	if force {
		if err := f.mkdirs(rel, o); err != nil {
			if errors.Is(err, ErrNotDir) {
				return Entry{}, fmt.Errorf("%w: %w", fs.ErrExist, err)
			}
			return Entry{}, err
		}
		return f.Stat(p)
	}
	if err := f.root.Mkdir(rel, 0o700); err != nil {
		return Entry{}, classify(err)
	}
	if err := f.setOwner(rel, o, DefaultUID, DefaultGID, DefaultDirMode); err != nil {
		return Entry{}, err
	}
	return f.Stat(p)
}

// Open opens file p for reading (ErrIsDir for a directory, ErrInvalidPath
// for a FIFO, socket or device).
func (f *Files) Open(p string) (*os.File, Entry, error) {
	rel, abs, err := CleanPath(p)
	if err != nil {
		return nil, Entry{}, err
	}
	// O_NONBLOCK: opening a FIFO (a sandbox can make one in a mounted
	// volume) would otherwise wait for a writer forever.
	file, err := f.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, Entry{}, classify(err)
	}
	info, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, Entry{}, classify(err)
	}
	if info.IsDir() {
		file.Close()
		return nil, Entry{}, fmt.Errorf("%s: %w", abs, ErrIsDir)
	}
	if !info.Mode().IsRegular() {
		file.Close()
		return nil, Entry{}, fmt.Errorf("%w: %s is not a regular file", ErrInvalidPath, abs)
	}
	return file, f.entry(rel, abs, info), nil
}

// Write stores the bytes of r as file p, streaming them into a new file
// next to it that takes p's name only once all of them are on disk (and
// synced): a failed or refused write leaves p as it was and nothing else
// behind. Without force p must not exist (fs.ErrExist) and its parent must
// (fs.ErrNotExist); with force the missing parents are created and an
// existing file replaced. A directory at p is fs.ErrExist. More than limit
// bytes (limit < 0: no limit), or a full filesystem, is ErrFull.
func (f *Files) Write(ctx context.Context, p string, r io.Reader, limit int64, o Owner, force bool) (Entry, error) {
	rel, _, err := CleanPath(p)
	if err != nil {
		return Entry{}, err
	}
	if rel == "." {
		return Entry{}, fmt.Errorf("/: %w", ErrIsDir)
	}
	if info, err := f.root.Stat(rel); err == nil {
		if info.IsDir() {
			return Entry{}, fmt.Errorf("%s: %w: %w", p, fs.ErrExist, ErrIsDir)
		}
		if !force {
			return Entry{}, fmt.Errorf("%s: %w", p, fs.ErrExist)
		}
	} else if err := classify(err); !errors.Is(err, fs.ErrNotExist) {
		return Entry{}, err
	}
	parent := path.Dir(rel)
	if force {
		if err := f.mkdirs(parent, Owner{UID: o.UID, GID: o.GID}); err != nil {
			return Entry{}, err
		}
	} else if info, err := f.root.Stat(parent); err != nil {
		return Entry{}, classify(err)
	} else if !info.IsDir() {
		return Entry{}, fmt.Errorf("%s: parent: %w", p, fs.ErrNotExist)
	}
	tmp, err := f.tempName(parent)
	if err != nil {
		return Entry{}, err
	}
	file, err := f.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return Entry{}, classify(err)
	}
	done := false
	defer func() {
		if !done {
			file.Close()
			_ = f.root.Remove(tmp)
		}
	}()
	if err := copyLimited(ctx, file, r, limit); err != nil {
		return Entry{}, err
	}
	if err := file.Sync(); err != nil {
		return Entry{}, classify(err)
	}
	if err := file.Close(); err != nil {
		return Entry{}, classify(err)
	}
	if err := f.setOwner(tmp, o, DefaultUID, DefaultGID, DefaultFileMode); err != nil {
		return Entry{}, err
	}
	if force {
		err = f.root.Rename(tmp, rel)
	} else {
		// A link fails when p appeared meanwhile: O_EXCL for the name.
		if err = f.root.Link(tmp, rel); err == nil {
			_ = f.root.Remove(tmp)
		} else if errors.Is(err, syscall.ENOTSUP) {
			// No hard links (s3fs: bucket volumes): a check, then the
			// rename, not atomic against a concurrent creator of p.
			if _, serr := f.root.Lstat(rel); serr == nil {
				err = fmt.Errorf("%s: %w", p, fs.ErrExist)
			} else {
				err = f.root.Rename(tmp, rel)
			}
		}
	}
	if err != nil {
		return Entry{}, classify(err)
	}
	done = true
	return f.Stat(p)
}

// TempPrefix starts the names of uploads in progress (hidden files next to
// their target).
const TempPrefix = ".airlock-upload-"

func (f *Files) tempName(dir string) (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return path.Join(dir, TempPrefix+hex.EncodeToString(b[:])), nil
}

// copyLimited copies r to w, failing with ErrFull past limit bytes (limit
// < 0: none) and with ctx's error once ctx ends.
func copyLimited(ctx context.Context, w io.Writer, r io.Reader, limit int64) error {
	buf := make([]byte, 256<<10)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		m, rerr := r.Read(buf)
		if m > 0 {
			n += int64(m)
			if limit >= 0 && n > limit {
				return fmt.Errorf("%w: the write is larger than the %d bytes left", ErrFull, limit)
			}
			if _, err := w.Write(buf[:m]); err != nil {
				return classify(err)
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("reading the upload: %w", rerr)
		}
	}
}

// SetMetadata changes the owner and mode of p (nil fields kept).
func (f *Files) SetMetadata(p string, o Owner) (Entry, error) {
	rel, _, err := CleanPath(p)
	if err != nil {
		return Entry{}, err
	}
	info, err := f.root.Lstat(rel)
	if err != nil {
		return Entry{}, classify(err)
	}
	if o.UID != nil || o.GID != nil {
		uid, gid := -1, -1
		if o.UID != nil {
			uid = int(*o.UID)
		}
		if o.GID != nil {
			gid = int(*o.GID)
		}
		if err := f.root.Lchown(rel, uid, gid); err != nil {
			return Entry{}, classify(err)
		}
	}
	if o.Mode != nil && info.Mode()&fs.ModeSymlink == 0 {
		if err := f.root.Chmod(rel, fileMode(*o.Mode)); err != nil {
			return Entry{}, classify(err)
		}
	}
	return f.Stat(p)
}

// Remove removes p, a directory with everything in it. The root cannot
// be removed (ErrInvalidPath).
func (f *Files) Remove(p string) error {
	rel, _, err := CleanPath(p)
	if err != nil {
		return err
	}
	if rel == "." {
		return fmt.Errorf("%w: the volume's root cannot be removed", ErrInvalidPath)
	}
	if _, err := f.root.Lstat(rel); err != nil {
		return classify(err)
	}
	return classify(f.root.RemoveAll(rel))
}
