//go:build linux

package imagebuild

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func write(t *testing.T, p, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("reading %s: %v", p, err)
	}
	return string(b)
}

func TestApplyUpper(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: whiteouts are 0/0 character devices and opaque dirs use trusted.* xattrs")
	}
	dir := t.TempDir()
	lower, upper, dst := filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "dst")
	write(t, filepath.Join(lower, "a"), "a", 0o644)
	write(t, filepath.Join(lower, "d/x"), "old x", 0o644)
	write(t, filepath.Join(lower, "d/y"), "y", 0o644)
	write(t, filepath.Join(lower, "o/p"), "p", 0o644)
	write(t, filepath.Join(lower, "etc/hosts"), "lower hosts", 0o644)
	if err := cloneTree(lower, dst); err != nil {
		t.Fatal(err)
	}

	if err := os.MkdirAll(upper, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(upper, "a"), unix.S_IFCHR, 0); err != nil {
		t.Fatalf("mknod whiteout: %v", err)
	}
	write(t, filepath.Join(upper, "d/x"), "new x", 0o600)
	if err := os.Chown(filepath.Join(upper, "d/x"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(upper, "d/z"), "z", 0o644)
	xattrs := unix.Setxattr(filepath.Join(upper, "d/z"), "trusted.airlock-test", []byte("v"), 0) == nil
	write(t, filepath.Join(upper, "o/q"), "q", 0o644)
	if err := unix.Setxattr(filepath.Join(upper, "o"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatalf("setting opaque xattr: %v", err)
	}
	if err := os.Symlink("d/z", filepath.Join(upper, "l")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(upper, "etc/hosts"), "runtime hosts", 0o644)

	if err := applyUpper(upper, dst); err != nil {
		t.Fatalf("applyUpper: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "a")); !os.IsNotExist(err) {
		t.Errorf("whiteout: a still exists (err %v)", err)
	}
	if got := read(t, filepath.Join(dst, "d/x")); got != "new x" {
		t.Errorf("d/x = %q, want new x", got)
	}
	if got := read(t, filepath.Join(lower, "d/x")); got != "old x" {
		t.Errorf("the parent layer changed through a hard link: lower d/x = %q", got)
	}
	fi, err := os.Stat(filepath.Join(dst, "d/x"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o600 || st.Uid != 1000 || st.Gid != 1000 {
		t.Errorf("d/x mode %v owner %d:%d, want 0600 1000:1000", fi.Mode().Perm(), st.Uid, st.Gid)
	}
	if xattrs {
		buf := make([]byte, 8)
		if n, err := unix.Lgetxattr(filepath.Join(dst, "d/z"), "trusted.airlock-test", buf); err != nil || string(buf[:n]) != "v" {
			t.Errorf("xattr not copied: %q, %v", buf[:max(n, 0)], err)
		}
	}
	if got := read(t, filepath.Join(dst, "d/y")); got != "y" {
		t.Errorf("unchanged d/y = %q", got)
	}
	entries, _ := os.ReadDir(filepath.Join(dst, "o"))
	if len(entries) != 1 || entries[0].Name() != "q" {
		t.Errorf("opaque dir o = %v, want only q", entries)
	}
	if l, err := os.Readlink(filepath.Join(dst, "l")); err != nil || l != "d/z" {
		t.Errorf("symlink l = %q, %v", l, err)
	}
	if got := read(t, filepath.Join(dst, "etc/hosts")); got != "lower hosts" {
		t.Errorf("runtime file leaked into the layer: etc/hosts = %q", got)
	}
}

func TestResolveCopy(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "app/a.txt"), "a", 0o644)
	write(t, filepath.Join(dir, "app/sub/b.txt"), "b", 0o644)
	write(t, filepath.Join(dir, "app/sub/c.key"), "secret", 0o600)
	write(t, filepath.Join(dir, "one.txt"), "1", 0o644)
	write(t, filepath.Join(dir, "two.txt"), "2", 0o644)
	write(t, filepath.Join(dir, ".dockerignore"), "**/*.key\n", 0o644)
	c, err := openContext(dir)
	if err != nil {
		t.Fatal(err)
	}
	dsts := func(items []copyItem) string {
		var s []string
		for _, it := range items {
			s = append(s, it.dst)
		}
		return strings.Join(s, " ")
	}
	items, err := c.resolveCopy([]string{"app/"}, "/home/user/app/")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dsts(items), "/home/user/app /home/user/app/a.txt /home/user/app/sub /home/user/app/sub/b.txt"; got != want {
		t.Errorf("dir copy = %q, want %q", got, want)
	}
	items, err = c.resolveCopy([]string{"*.txt"}, "/dst")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dsts(items), "/dst/one.txt /dst/two.txt"; got != want {
		t.Errorf("glob copy = %q, want %q", got, want)
	}
	items, err = c.resolveCopy([]string{"one.txt"}, "/etc/renamed")
	if err != nil || dsts(items) != "/etc/renamed" {
		t.Errorf("file copy = %q, %v", dsts(items), err)
	}
	if _, err := c.resolveCopy([]string{"../outside"}, "/x"); err == nil {
		t.Error("a source outside the context resolved")
	}
	if _, err := c.resolveCopy([]string{"app/sub/c.key"}, "/x"); err == nil || !strings.Contains(err.Error(), "dockerignore") {
		t.Errorf("an ignored source resolved: %v", err)
	}
	h1, _ := c.hashItems(items)
	write(t, filepath.Join(dir, "one.txt"), "changed", 0o644)
	items, _ = c.resolveCopy([]string{"one.txt"}, "/etc/renamed")
	if h2, _ := c.hashItems(items); h1 == h2 {
		t.Error("content change did not change the COPY hash")
	}
}

func TestCopyIntoChownAndSymlinkSafety(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	ctx, rootfs := t.TempDir(), t.TempDir()
	write(t, filepath.Join(ctx, "f"), "data", 0o640)
	// A symlink in the image pointing outside must not redirect the write.
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(rootfs, "evil")); err != nil {
		t.Fatal(err)
	}
	c, _ := openContext(ctx)
	items, err := c.resolveCopy([]string{"f"}, "/srv/app/f")
	if err != nil {
		t.Fatal(err)
	}
	if err := copyInto(c, rootfs, items, &owner{uid: 1000, gid: 1001}, 0); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(rootfs, "srv/app/f"))
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 1000 || st.Gid != 1001 || fi.Mode().Perm() != 0o640 {
		t.Errorf("copied file: uid %d gid %d mode %v, want 1000 1001 0640", st.Uid, st.Gid, fi.Mode().Perm())
	}
	items, _ = c.resolveCopy([]string{"f"}, "/evil/f")
	if err := copyInto(c, rootfs, items, nil, 0); err == nil {
		t.Error("copy through a symlink leaving the image succeeded")
	}
	if _, err := os.Stat(filepath.Join(outside, "f")); err == nil {
		t.Error("a file was written outside the image")
	}
}

func TestExtractContext(t *testing.T) {
	mk := func(entries ...tar.Header) *bytes.Buffer {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range entries {
			h.Size = int64(len(h.Linkname))
			if h.Typeflag == tar.TypeSymlink {
				h.Size = 0
			}
			if err := tw.WriteHeader(&h); err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				_, _ = tw.Write([]byte(h.Linkname))
			}
		}
		tw.Close()
		return &buf
	}
	dir := t.TempDir()
	ok := mk(tar.Header{Name: "sub/", Typeflag: tar.TypeDir, Mode: 0o755},
		tar.Header{Name: "sub/f", Typeflag: tar.TypeReg, Mode: 0o644, Linkname: ""})
	if err := ExtractContext(ok, dir); err != nil {
		t.Fatalf("ExtractContext: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sub/f")); err != nil {
		t.Error(err)
	}
	for _, h := range []tar.Header{
		{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "dev", Typeflag: tar.TypeChar, Mode: 0o644},
	} {
		if err := ExtractContext(mk(h), t.TempDir()); err == nil {
			t.Errorf("entry %q (type %c) accepted", h.Name, h.Typeflag)
		}
	}
	// A symlink pointing outside, then a file written through it.
	d2 := t.TempDir()
	outside := t.TempDir()
	bad := mk(tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside},
		tar.Header{Name: "l/f", Typeflag: tar.TypeReg, Mode: 0o644})
	_ = ExtractContext(bad, d2)
	if _, err := os.Stat(filepath.Join(outside, "f")); err == nil {
		t.Error("a context entry was written outside the context dir")
	}
}

func TestStartCommand(t *testing.T) {
	for _, tc := range []struct {
		st   state
		want string
	}{
		{state{cmd: []string{"python3", "-m", "http.server"}, cmdExec: true}, "'python3' '-m' 'http.server'"},
		{state{cmd: []string{"npm start"}}, "npm start"},
		{state{ep: []string{"/entry.sh"}, epExec: true, cmd: []string{"--port", "1"}, cmdExec: true}, "'/entry.sh' '--port' '1'"},
		{state{ep: []string{"run it"}, cmd: []string{"ignored"}, cmdExec: true}, "run it"},
		{state{cmd: []string{"it's"}, cmdExec: true}, `'it'\''s'`},
		{state{}, ""},
	} {
		if got := startCommand(&tc.st); got != tc.want {
			t.Errorf("startCommand(%+v) = %q, want %q", tc.st, got, tc.want)
		}
	}
}

func TestExistsInRoot(t *testing.T) {
	dir := t.TempDir()
	for p, want := range map[string]bool{"/": true, "": true, "/nope": false, "/.": true} {
		got, err := existsIn(dir, p)
		if err != nil || got != want {
			t.Errorf("existsIn(%q) = %v, %v; want %v", p, got, err, want)
		}
	}
}
