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

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// buildContext is the extracted build context on the host.
type buildContext struct {
	dir    string
	ignore *patternmatcher.PatternMatcher // nil: nothing ignored
}

func openContext(dir string) (*buildContext, error) {
	c := &buildContext{dir: dir}
	f, err := os.Open(filepath.Join(dir, ".dockerignore"))
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading .dockerignore: %w", err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		return nil, userErr("reading .dockerignore: %v", err)
	}
	if c.ignore, err = patternmatcher.New(patterns); err != nil {
		return nil, userErr(".dockerignore: %v", err)
	}
	return c, nil
}

func (c *buildContext) ignored(rel string) bool {
	if c.ignore == nil {
		return false
	}
	ok, err := c.ignore.MatchesOrParentMatches(filepath.ToSlash(rel))
	return err == nil && ok
}

// copyItem is one context entry to copy: src (host path), dst (path in the
// image, absolute) and its info.
type copyItem struct {
	src string
	dst string
	fi  fs.FileInfo
}

// resolveCopy expands the COPY/ADD sources (globs, directories, ignore
// rules) into the entries to copy, in a stable order. dest is absolute.
func (c *buildContext) resolveCopy(sources []string, dest string) ([]copyItem, error) {
	destIsDir := strings.HasSuffix(dest, "/") || len(sources) > 1
	dest = path.Clean(dest)
	var matches []string
	for _, s := range sources {
		clean := path.Clean("/" + filepath.ToSlash(s))[1:]
		if clean == "" {
			clean = "."
		}
		pattern := filepath.Join(c.dir, filepath.FromSlash(clean))
		ms, err := filepath.Glob(pattern)
		if err != nil {
			return nil, userErr("bad source pattern %q: %v", s, err)
		}
		var kept []string
		for _, m := range ms {
			rel, _ := filepath.Rel(c.dir, m)
			if rel == "." || !c.ignored(rel) {
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
		fi, err := os.Lstat(m)
		if err != nil {
			return nil, fmt.Errorf("reading context: %w", err)
		}
		if !fi.IsDir() {
			d := dest
			if destIsDir {
				d = path.Join(dest, filepath.Base(m))
			}
			items = append(items, copyItem{src: m, dst: d, fi: fi})
			continue
		}
		// A directory: its contents go into dest.
		err = filepath.WalkDir(m, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(c.dir, p)
			if p != m && c.ignored(rel) {
				if de.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			inner, _ := filepath.Rel(m, p)
			fi, err := de.Info()
			if err != nil {
				return err
			}
			items = append(items, copyItem{src: p, dst: path.Join(dest, filepath.ToSlash(inner)), fi: fi})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("reading context: %w", err)
		}
	}
	slices.SortStableFunc(items, func(a, b copyItem) int { return strings.Compare(a.dst, b.dst) })
	return items, nil
}

// hashItems returns a digest over the items' destinations, types, modes
// and contents.
func hashItems(items []copyItem) (string, error) {
	h := sha256.New()
	for _, it := range items {
		fmt.Fprintf(h, "%s\x00%o\x00", it.dst, it.fi.Mode())
		switch {
		case it.fi.Mode().IsRegular():
			f, err := os.Open(it.src)
			if err != nil {
				return "", fmt.Errorf("reading context: %w", err)
			}
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return "", fmt.Errorf("reading context: %w", err)
			}
		case it.fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(it.src)
			if err != nil {
				return "", fmt.Errorf("reading context: %w", err)
			}
			h.Write([]byte(t))
		}
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
