package imagebuild

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// buildContext is the extracted build context on the host. Every read of it
// goes through root, and every path is resolved by resolve first: a
// symlink is followed only while it stays inside the context (the way
// BuildKit treats a context), so no COPY, ADD or .dockerignore can read a
// file of the host.
type buildContext struct {
	root   *os.Root
	ignore *patternmatcher.PatternMatcher // nil: nothing ignored
}

// maxLinkHops bounds the symlinks followed while resolving one path
// (Linux's MAXSYMLINKS).
const maxLinkHops = 40

func openContext(dir string) (*buildContext, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("opening the build context: %w", err)
	}
	c := &buildContext{root: root}
	if err := c.readIgnore(); err != nil {
		root.Close()
		return nil, err
	}
	return c, nil
}

func (c *buildContext) close() { c.root.Close() }

func (c *buildContext) readIgnore() error {
	rel, err := c.resolve(".dockerignore", ".dockerignore", true)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	f, err := c.openRegular(".dockerignore", rel)
	if err != nil {
		return err
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		return userErr("reading .dockerignore: %v", err)
	}
	if c.ignore, err = patternmatcher.New(patterns); err != nil {
		return userErr(".dockerignore: %v", err)
	}
	return nil
}

func (c *buildContext) ignored(rel string) bool {
	if c.ignore == nil {
		return false
	}
	ok, err := c.ignore.MatchesOrParentMatches(filepath.ToSlash(rel))
	return err == nil && ok
}

// resolve returns rel (a clean, slash-separated path relative to the
// context) with the symlinks in it resolved inside the context; the last
// element is resolved only when followLast is set. A link whose target is
// absolute, or climbs out of the context with "..", directly or through a
// chain of links, is refused with a user error naming src (the source as
// the Dockerfile writes it) and the link. A missing element gives an error
// matching fs.ErrNotExist.
func (c *buildContext) resolve(src, rel string, followLast bool) (string, error) {
	var done []string // resolved elements: no symlink among them
	todo := splitRel(rel)
	hops := 0
	via := "" // the last link followed, for the error
	for len(todo) > 0 {
		elem := todo[0]
		todo = todo[1:]
		switch elem {
		case ".":
			continue
		case "..":
			if len(done) == 0 {
				if via != "" {
					return "", userErr("%s: %s, outside the build context", src, via)
				}
				return "", userErr("%s: the path leaves the build context", src)
			}
			done = done[:len(done)-1]
			continue
		}
		cur := path.Join(append(slices.Clone(done), elem)...)
		fi, err := c.root.Lstat(cur)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				return "", fmt.Errorf("%s: %w", src, fs.ErrNotExist)
			}
			return "", fmt.Errorf("reading the build context: %w", err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 || (len(todo) == 0 && !followLast) {
			done = append(done, elem)
			continue
		}
		if hops++; hops > maxLinkHops {
			return "", userErr("%s: too many levels of symbolic links", src)
		}
		target, err := c.root.Readlink(cur)
		if err != nil {
			return "", fmt.Errorf("reading the build context: %w", err)
		}
		via = fmt.Sprintf("symlink %s points to %s", cur, target)
		if path.IsAbs(target) {
			return "", userErr("%s: %s, outside the build context", src, via)
		}
		// The target is relative to the link's directory (done): a ".."
		// climbing above the context root is refused above.
		todo = append(splitRel(target), todo...)
	}
	if len(done) == 0 {
		return ".", nil
	}
	return path.Join(done...), nil
}

func splitRel(p string) []string {
	var out []string
	for _, e := range strings.Split(p, "/") {
		if e != "" {
			out = append(out, e)
		}
	}
	return out
}

// openRegular opens the resolved path rel for reading, refusing anything but
// a regular file (no link is followed: rel has none).
func (c *buildContext) openRegular(src, rel string) (*os.File, error) {
	f, err := c.root.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s in the build context: %w", src, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening %s in the build context: %w", src, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, userErr("%s: not a regular file", src)
	}
	return f, nil
}

// glob expands pattern (a clean relative path whose elements may hold
// filepath.Match wildcards) inside the context. Directories are listed
// through root after resolving them, so a wildcard never reads a directory
// outside the context. Matches are returned as paths written in the
// context's terms (links not resolved), in lexical order per directory.
func (c *buildContext) glob(src, pattern string) ([]string, error) {
	cands := []string{"."}
	for _, elem := range splitRel(pattern) {
		if !hasMeta(elem) {
			for i := range cands {
				cands[i] = path.Join(cands[i], elem)
			}
			continue
		}
		if _, err := path.Match(elem, ""); err != nil {
			return nil, userErr("bad source pattern %q: %v", src, err)
		}
		var next []string
		for _, d := range cands {
			rd, err := c.resolve(src, d, true)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			ents, err := fs.ReadDir(c.root.FS(), rd)
			if err != nil {
				continue // not a directory: nothing matches below it
			}
			for _, e := range ents {
				if ok, _ := path.Match(elem, e.Name()); ok {
					next = append(next, path.Join(d, e.Name()))
				}
			}
		}
		cands = next
	}
	var out []string
	for _, m := range cands {
		_, err := c.resolve(src, m, false)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// hasMeta reports whether a pattern element holds wildcards or escapes
// (path.Match handles both).
func hasMeta(s string) bool { return strings.ContainsAny(s, `*?[\`) }

// copyItem is one context entry to copy: src (path relative to the context
// root, with no symlink in it but possibly the entry itself), dst (path in
// the image, absolute) and its info (of the entry, not followed).
type copyItem struct {
	src string
	dst string
	fi  fs.FileInfo
}

// resolveCopy expands the COPY/ADD sources (globs, directories, ignore
// rules) into the entries to copy, in a stable order. dest is absolute.
// Links on the way to a source are followed inside the context; a source
// that is itself a link, and links met while walking a directory, are
// copied as links (copying a link reads nothing, whatever its target).
func (c *buildContext) resolveCopy(sources []string, dest string) ([]copyItem, error) {
	destIsDir := strings.HasSuffix(dest, "/") || len(sources) > 1
	dest = path.Clean(dest)
	var matches []string
	for _, s := range sources {
		clean := path.Clean("/" + filepath.ToSlash(s))[1:]
		if clean == "" {
			clean = "."
		}
		ms, err := c.glob(s, clean)
		if err != nil {
			return nil, err
		}
		var kept []string
		for _, m := range ms {
			if m == "." || !c.ignored(m) {
				kept = append(kept, m)
			}
		}
		if len(kept) == 0 {
			return nil, userErr("%q: no such file or directory in the build context (or excluded by .dockerignore)", s)
		}
		if len(kept) > 1 {
			destIsDir = true
		}
		matches = append(matches, kept...)
	}
	var items []copyItem
	for _, m := range matches {
		src, err := c.resolve(m, m, false)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, userErr("%q: a symlink in it points to nothing in the build context", m)
		}
		if err != nil {
			return nil, err
		}
		fi, err := c.root.Lstat(src)
		if err != nil {
			return nil, fmt.Errorf("reading the build context: %w", err)
		}
		if !fi.IsDir() {
			d := dest
			if destIsDir {
				d = path.Join(dest, path.Base(m))
			}
			items = append(items, copyItem{src: src, dst: d, fi: fi})
			continue
		}
		// A directory: its contents go into dest. WalkDir does not follow
		// the links it meets; they are copied as links.
		err = fs.WalkDir(c.root.FS(), src, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			inner := ""
			switch {
			case p == src:
			case src == ".":
				inner = p
			default:
				inner = strings.TrimPrefix(p, src+"/")
			}
			if p != src && c.ignored(p) {
				if de.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			fi, err := de.Info()
			if err != nil {
				return err
			}
			items = append(items, copyItem{src: p, dst: path.Join(dest, inner), fi: fi})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("reading the build context: %w", err)
		}
	}
	slices.SortStableFunc(items, func(a, b copyItem) int { return strings.Compare(a.dst, b.dst) })
	return items, nil
}

// hashItems returns a digest over the items' destinations, types, modes
// and contents.
func (c *buildContext) hashItems(items []copyItem) (string, error) {
	h := sha256.New()
	for _, it := range items {
		fmt.Fprintf(h, "%s\x00%o\x00", it.dst, it.fi.Mode())
		switch {
		case it.fi.Mode().IsRegular():
			f, err := c.openRegular(it.src, it.src)
			if err != nil {
				return "", err
			}
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return "", fmt.Errorf("reading the build context: %w", err)
			}
		case it.fi.Mode()&fs.ModeSymlink != 0:
			t, err := c.root.Readlink(it.src)
			if err != nil {
				return "", fmt.Errorf("reading the build context: %w", err)
			}
			h.Write([]byte(t))
		}
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
