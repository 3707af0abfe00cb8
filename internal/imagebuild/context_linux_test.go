//go:build linux

package imagebuild

import (
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// contextWith makes a build context holding files (name → content) and
// links (name → target).
func contextWith(t *testing.T, files, links map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for n, c := range files {
		write(t, filepath.Join(dir, n), c, 0o644)
	}
	for n, target := range links {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestResolveCopySymlinks: links inside the context are followed, links
// leaving it (absolute, "..", through a chain, through a glob, as
// .dockerignore) are refused with a 400 naming the source and the link.
func TestResolveCopySymlinks(t *testing.T) {
	dir := contextWith(t, map[string]string{"sub/f.txt": "in", "sub/deep/g.txt": "g", "hostname": "ctx-hostname"},
		map[string]string{
			"d":          "sub",               // in the context
			"chain":      "d/deep",            // a chain staying inside
			"up":         "sub/..",            // the root, through ".."
			"abs":        "/etc",              // absolute: outside
			"proc":       "/proc/self",        // absolute: outside
			"climb":      "../../../etc",      // ".." out
			"sub/out":    "../..",             // ".." out from a subdirectory
			"hop1":       "sub/hop2",          // a chain that ends outside
			"sub/hop2":   "../climb",          //
			"sub/inlink": "../sub/deep/g.txt", // copied as a link in a walk
			"loop":       "loop",
		})
	c, err := openContext(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	read := func(src string) string {
		t.Helper()
		items, err := c.resolveCopy([]string{src}, "/x")
		if err != nil {
			t.Fatalf("COPY %s: %v", src, err)
		}
		f, err := c.openRegular(items[0].src, items[0].src)
		if err != nil {
			t.Fatalf("COPY %s: %v", src, err)
		}
		defer f.Close()
		buf := make([]byte, 64)
		n, _ := f.Read(buf)
		return string(buf[:n])
	}
	for src, want := range map[string]string{"d/f.txt": "in", "chain/g.txt": "g", "up/hostname": "ctx-hostname", "d/../hostname": "ctx-hostname"} {
		if got := read(src); got != want {
			t.Errorf("COPY %s read %q, want %q", src, got, want)
		}
	}
	// A directory through a link: its links stay links.
	items, err := c.resolveCopy([]string{"d"}, "/x/")
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.dst == "/x/inlink" && it.fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("a link inside a copied directory was followed: %+v", it)
		}
	}
	for _, src := range []string{"abs/hostname", "proc/environ", "abs/host*", "climb/hostname", "sub/out/etc/hostname",
		"hop1/hostname", "d/../abs/passwd", "*/hostname"} {
		_, err := c.resolveCopy([]string{src}, "/x")
		ue, ok := sandbox.AsUserError(err)
		if !ok || ue.Code != http.StatusBadRequest || !strings.Contains(ue.Msg, "outside the build context") {
			t.Errorf("COPY %s: %v; want a 400 saying it leaves the build context", src, err)
			continue
		}
		if first := strings.SplitN(src, "/", 2)[0]; !strings.Contains(ue.Msg, src) && !strings.Contains(ue.Msg, first) {
			t.Errorf("COPY %s: message %q does not name the path", src, ue.Msg)
		}
	}
	// A source that is itself a link is copied as the link, not followed.
	items, err = c.resolveCopy([]string{"abs"}, "/x")
	if err != nil || len(items) != 1 || items[0].fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("COPY abs: %+v, %v; want the link itself", items, err)
	}
	if _, err := c.resolveCopy([]string{"loop/x"}, "/x"); err == nil || !strings.Contains(err.Error(), "too many levels") {
		t.Errorf("a link loop: %v", err)
	}
	// A .dockerignore that is a link out.
	bad := contextWith(t, nil, map[string]string{".dockerignore": "/etc/passwd"})
	if _, err := openContext(bad); err == nil || !strings.Contains(err.Error(), "outside the build context") {
		t.Errorf(".dockerignore -> /etc/passwd: %v", err)
	}
	// One inside is read.
	good := contextWith(t, map[string]string{"ign": "*.key\n", "a.key": "k", "b.txt": "b"}, map[string]string{".dockerignore": "ign"})
	gc, err := openContext(good)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.close()
	if _, err := gc.resolveCopy([]string{"a.key"}, "/x"); err == nil {
		t.Error(".dockerignore through an in-context link was not applied")
	}
}

// FuzzResolve: whatever links a context holds and whatever path a COPY
// names, a resolved path is inside the context (also by the kernel's own
// resolution of it).
func FuzzResolve(f *testing.F) {
	f.Add("../..", "/etc", "a/b/..", "l1/l2/x")
	f.Add("a", "../l1/../..", "l3", "l2/b/f")
	f.Add("l2", "l1", "..", "l3/etc/hostname")
	f.Fuzz(func(t *testing.T, t1, t2, t3, p string) {
		if len(p) > 200 || t1 == "" || t2 == "" || t3 == "" || strings.ContainsRune(t1+t2+t3+p, 0) {
			return
		}
		dir := contextWith(t, map[string]string{"a/b/f": "f", "a/g": "g"},
			map[string]string{"l1": t1, "a/l2": t2, "a/b/l3": t3})
		c, err := openContext(dir)
		if err != nil {
			return
		}
		defer c.close()
		rel := path.Clean("/" + p)[1:]
		if rel == "" {
			rel = "."
		}
		got, err := c.resolve(p, rel, true)
		if err != nil {
			return
		}
		if got != "." && (strings.HasPrefix(got, "../") || got == ".." || path.IsAbs(got)) {
			t.Fatalf("resolve(%q) = %q", p, got)
		}
		real, err := filepath.EvalSymlinks(filepath.Join(dir, got))
		if err != nil {
			t.Fatalf("resolve(%q) = %q, which does not exist: %v", p, got, err)
		}
		if real != dir && !strings.HasPrefix(real, dir+"/") {
			t.Fatalf("resolve(%q) = %q, which is %s on the host, outside %s", p, got, real, dir)
		}
	})
}
