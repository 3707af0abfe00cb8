//go:build linux

package nfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	billy "github.com/go-git/go-billy/v5"
)

// rootFS is a billy.Filesystem (and billy.Change) confined to one
// directory through an os.Root: every path is resolved by the kernel
// relative to the root's descriptor, and a `..` or a symbolic link (relative
// or absolute) that would lead out of it fails, at the time of the
// operation (no check-then-use race). What it creates is owned by uid:gid
// (the sandboxes' user, as with the content API), whichever guest user
// asked: the server sees only the guest's claimed AUTH_UNIX identity, which
// it does not trust.
type rootFS struct {
	root     *os.Root
	uid, gid int
	readOnly bool
	// table holds the export's handles when its file system has none of
	// its own (pathtable_linux.go); nil otherwise.
	table *pathTable
}

var (
	_ billy.Filesystem = (*rootFS)(nil)
	_ billy.Change     = (*rootFS)(nil)
	_ billy.Capable    = (*rootFS)(nil)
)

// errReadOnly answers writes to a read-only export.
var errReadOnly = fmt.Errorf("read-only volume mount: %w", fs.ErrPermission)

// rel turns a billy path (absolute or relative, "/" separated) into a path
// relative to the root; "" and "/" are the root itself. `..` is left for
// os.Root to refuse when it leaves the root.
func rel(name string) string {
	name = strings.TrimLeft(name, "/")
	if name == "" {
		return "."
	}
	return name
}

func (r *rootFS) Capabilities() billy.Capability {
	if r.readOnly {
		return billy.ReadCapability | billy.SeekCapability
	}
	return billy.DefaultCapabilities &^ billy.LockCapability
}

func (r *rootFS) Create(name string) (billy.File, error) {
	return r.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
}

func (r *rootFS) Open(name string) (billy.File, error) {
	return r.OpenFile(name, os.O_RDONLY, 0)
}

func (r *rootFS) OpenFile(name string, flag int, perm os.FileMode) (billy.File, error) {
	if r.readOnly && flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND) != 0 {
		return nil, errReadOnly
	}
	p := rel(name)
	created := false
	if flag&os.O_CREATE != 0 {
		if _, err := r.root.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			created = true
		}
	}
	f, err := r.root.OpenFile(p, flag, perm)
	if err != nil {
		return nil, err
	}
	if created {
		_ = f.Chown(r.uid, r.gid)
	}
	return &file{File: f, name: name}, nil
}

func (r *rootFS) Stat(name string) (os.FileInfo, error) {
	fi, err := r.root.Stat(rel(name))
	return r.stable(name, fi), err
}

func (r *rootFS) Lstat(name string) (os.FileInfo, error) {
	fi, err := r.root.Lstat(rel(name))
	return r.stable(name, fi), err
}

func (r *rootFS) Rename(from, to string) error {
	if r.readOnly {
		return errReadOnly
	}
	if err := r.root.Rename(rel(from), rel(to)); err != nil {
		return err
	}
	if r.table != nil {
		r.table.renamed(from, to)
	}
	return nil
}

func (r *rootFS) Remove(name string) error {
	if r.readOnly {
		return errReadOnly
	}
	if err := r.root.Remove(rel(name)); err != nil {
		return err
	}
	if r.table != nil {
		r.table.removed(name)
	}
	return nil
}

func (r *rootFS) Join(elem ...string) string { return path.Join(elem...) }

func (r *rootFS) TempFile(dir, prefix string) (billy.File, error) {
	if r.readOnly {
		return nil, errReadOnly
	}
	for i := 0; i < 100; i++ {
		name := path.Join(dir, fmt.Sprintf("%s%d", prefix, time.Now().UnixNano()+int64(i)))
		f, err := r.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, fmt.Errorf("temp file in %s: %w", dir, fs.ErrExist)
}

func (r *rootFS) ReadDir(name string) ([]os.FileInfo, error) {
	d, err := r.root.Open(rel(name))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	fis, err := d.Readdir(-1)
	for i, fi := range fis {
		fis[i] = r.stable(path.Join(name, fi.Name()), fi)
	}
	return fis, err
}

func (r *rootFS) MkdirAll(name string, perm os.FileMode) error {
	if r.readOnly {
		return errReadOnly
	}
	p := rel(name)
	if _, err := r.root.Lstat(p); err == nil {
		return r.root.MkdirAll(p, perm)
	}
	if err := r.root.MkdirAll(p, perm); err != nil {
		return err
	}
	return r.root.Lchown(p, r.uid, r.gid)
}

func (r *rootFS) Symlink(target, link string) error {
	if r.readOnly {
		return errReadOnly
	}
	// The target is only text: the guest resolves it in its own tree;
	// this server never follows a link out (os.Root).
	p := rel(link)
	if err := r.root.Symlink(target, p); err != nil {
		return err
	}
	return r.root.Lchown(p, r.uid, r.gid)
}

func (r *rootFS) Readlink(link string) (string, error) { return r.root.Readlink(rel(link)) }

func (r *rootFS) Chroot(string) (billy.Filesystem, error) {
	return nil, errors.New("nfs: chroot is not supported")
}

func (r *rootFS) Root() string { return "/" }

// billy.Change.

func (r *rootFS) Chmod(name string, mode os.FileMode) error {
	if r.readOnly {
		return errReadOnly
	}
	return r.root.Chmod(rel(name), mode)
}

// Lchown and Chown keep the volume's owner: a guest's chown cannot give a
// file to another host user.
func (r *rootFS) Lchown(name string, _, _ int) error {
	if r.readOnly {
		return errReadOnly
	}
	_, err := r.root.Lstat(rel(name))
	return err
}

func (r *rootFS) Chown(name string, _, _ int) error {
	if r.readOnly {
		return errReadOnly
	}
	_, err := r.root.Stat(rel(name))
	return err
}

func (r *rootFS) Chtimes(name string, atime, mtime time.Time) error {
	if r.readOnly {
		return errReadOnly
	}
	return r.root.Chtimes(rel(name), atime, mtime)
}

// file is an *os.File opened through the root, under its billy name.
type file struct {
	*os.File
	name string
}

func (f *file) Name() string  { return f.name }
func (f *file) Lock() error   { return nil }
func (f *file) Unlock() error { return nil }
