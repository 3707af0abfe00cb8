package imagebuild

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// ExtractContext unpacks a build context tar into the empty directory dir.
// Only directories, regular files and symlinks are accepted; paths may not
// leave dir (all writes go through an os.Root), owners are not kept. A
// symlink is created with whatever target it names: a link is data, copied
// as a link; the build follows one only while it stays inside the context
// (buildContext.resolve).
func ExtractContext(r io.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("opening context dir: %w", err)
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return userErr("reading the build context tar: %v", err)
		}
		name := path.Clean("/" + h.Name)[1:]
		if name == "" {
			continue
		}
		if strings.HasPrefix(h.Name, "/") || strings.Contains("/"+h.Name+"/", "/../") {
			return userErr("build context: bad path %q", h.Name)
		}
		if err := root.MkdirAll(path.Dir(name), 0o755); err != nil && path.Dir(name) != "." {
			return userErr("build context: %s: %v", name, err)
		}
		mode := fs.FileMode(h.Mode) & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return userErr("build context: %s: %v", name, err)
			}
			if err := root.Chmod(name, mode|0o700); err != nil {
				return fmt.Errorf("build context: %w", err)
			}
		case tar.TypeReg:
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				return userErr("build context: %s: %v", name, err)
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("build context: writing %s: %w", name, err)
			}
			if err := root.Chmod(name, mode); err != nil {
				return fmt.Errorf("build context: %w", err)
			}
			if err := root.Chtimes(name, h.ModTime, h.ModTime); err != nil {
				return fmt.Errorf("build context: %w", err)
			}
		case tar.TypeSymlink:
			if err := root.Symlink(h.Linkname, name); err != nil {
				return userErr("build context: %s: %v", name, err)
			}
		default:
			return userErr("build context: %s: unsupported entry type %q (only files, directories and symlinks)", name, h.Typeflag)
		}
	}
}
