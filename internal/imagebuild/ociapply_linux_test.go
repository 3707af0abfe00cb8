//go:build linux

package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

var mtime = time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)

// tarOf builds an uncompressed layer tar from headers; regular files get
// body as content.
func tarOf(t *testing.T, hs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hs {
		body := h.Linkname
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if h.Typeflag == tar.TypeReg {
			h.Linkname = ""
		}
		if h.ModTime.IsZero() {
			h.ModTime = mtime
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.WriteString(tw, body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func dirH(n string) *tar.Header { return &tar.Header{Name: n, Typeflag: tar.TypeDir, Mode: 0o755} }

// fileH is a regular file; its content is passed in Linkname (see tarOf).
func fileH(n, content string, mode int64) *tar.Header {
	return &tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: mode, Linkname: content}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func TestLayerApplierWhiteoutsAndMetadata(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (owners, device nodes); run the unit tests as root")
	}
	root := t.TempDir()
	a := newLayerApplier(root)
	suid := fileH("bin/tool", "tool", 0o4755)
	suid.Uid, suid.Gid = 1000, 1001
	l1 := tarOf(t,
		dirH("./"), dirH("a/"), fileH("a/keep", "k", 0o644), fileH("a/gone", "g", 0o644),
		dirH("b/"), fileH("b/old", "o", 0o644), dirH("b/sub/"), fileH("b/sub/deep", "d", 0o644),
		dirH("bin/"), suid,
		&tar.Header{Name: "bin/sh", Typeflag: tar.TypeSymlink, Linkname: "/bin/tool"},
		&tar.Header{Name: "bin/hard", Typeflag: tar.TypeLink, Linkname: "bin/tool"},
		&tar.Header{Name: "abs", Typeflag: tar.TypeSymlink, Linkname: "/a"},
		dirH("dev/"), &tar.Header{Name: "dev/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3},
	)
	l2 := tarOf(t,
		fileH("a/.wh.gone", "", 0o644),
		dirH("b/"), fileH("b/.wh..wh..opq", "", 0o644), fileH("b/new", "n", 0o600), dirH("b/sub/"),
		fileH("abs/through-link", "x", 0o644), // lands in /a: absolute links resolve inside the root
		fileH("a/keep", "k2", 0o640),
	)
	for _, l := range [][]byte{l1, l2} {
		if err := a.apply(bytes.NewReader(l)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.finish(); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(root, "a/gone")) {
		t.Error("whiteout did not delete a/gone")
	}
	if got := read(t, filepath.Join(root, "a/keep")); got != "k2" {
		t.Errorf("a/keep = %q, want the upper layer's content", got)
	}
	if exists(filepath.Join(root, "b/old")) || exists(filepath.Join(root, "b/sub/deep")) {
		t.Error("opaque dir kept lower-layer entries")
	}
	if !exists(filepath.Join(root, "b/new")) || !exists(filepath.Join(root, "b/sub")) {
		t.Error("opaque dir lost entries of its own layer")
	}
	if got := read(t, filepath.Join(root, "a/through-link")); got != "x" {
		t.Errorf("write through absolute symlink: %q", got)
	}
	fi, err := os.Stat(filepath.Join(root, "bin/tool"))
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode()&os.ModeSetuid == 0 || fi.Mode().Perm() != 0o755 || st.Uid != 1000 || st.Gid != 1001 {
		t.Errorf("bin/tool mode %v uid %d gid %d, want setuid 0755 1000:1001", fi.Mode(), st.Uid, st.Gid)
	}
	if !fi.ModTime().Equal(mtime) {
		t.Errorf("bin/tool mtime %v, want %v", fi.ModTime(), mtime)
	}
	hfi, err := os.Stat(filepath.Join(root, "bin/hard"))
	if err != nil || !os.SameFile(fi, hfi) {
		t.Errorf("bin/hard is not a hard link of bin/tool: %v", err)
	}
	if l, _ := os.Readlink(filepath.Join(root, "bin/sh")); l != "/bin/tool" {
		t.Errorf("bin/sh -> %q", l)
	}
	dfi, err := os.Lstat(filepath.Join(root, "dev/null"))
	if err != nil || dfi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("dev/null not a char device: %v", err)
	}
	bfi, _ := os.Stat(filepath.Join(root, "b"))
	if !bfi.ModTime().Equal(mtime) {
		t.Errorf("dir b mtime %v, want %v (restored after children)", bfi.ModTime(), mtime)
	}
}

func TestLayerApplierRefuses(t *testing.T) {
	cases := map[string]*tar.Header{
		"absolute path":       fileH("/etc/x", "x", 0o644),
		"dot-dot":             fileH("a/../../x", "x", 0o644),
		"device outside /dev": {Name: "etc/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3},
		"hard link dot-dot":   {Name: "h", Typeflag: tar.TypeLink, Linkname: "../../etc/shadow"},
	}
	for what, h := range cases {
		t.Run(what, func(t *testing.T) {
			root := t.TempDir()
			err := newLayerApplier(root).apply(bytes.NewReader(tarOf(t, h)))
			if err == nil {
				t.Fatalf("%s accepted", what)
			}
			if _, ok := sandbox.AsUserError(err); !ok {
				t.Errorf("want a user error, got %v", err)
			}
		})
	}
	// A symlink pointing outside cannot carry writes out of the root.
	root := t.TempDir()
	outside := t.TempDir()
	l := tarOf(t, &tar.Header{Name: "esc", Typeflag: tar.TypeSymlink, Linkname: "../../../../" + strings.TrimPrefix(outside, "/")},
		fileH("esc/pwned", "x", 0o644))
	if err := newLayerApplier(root).apply(bytes.NewReader(l)); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(outside, "pwned")) {
		t.Fatal("write escaped the root through a symlink")
	}
	if !exists(filepath.Join(root, strings.TrimPrefix(outside, "/"), "pwned")) {
		t.Error("write through the link did not land inside the root")
	}
}

func testImage(t *testing.T) v1.Image {
	t.Helper()
	l1, err := tarball.LayerFromOpener(opener(tarOf(t, dirH("bin/"), fileH("bin/hello", "hi", 0o755), fileH("bin/tmp", "t", 0o644), dirH("etc/"),
		fileH("etc/passwd", "root:x:0:0:root:/root:/bin/sh", 0o644))))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := tarball.LayerFromOpener(opener(tarOf(t, fileH("bin/.wh.tmp", "", 0o644))))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l1, l2)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = []string{"PATH=/bin", "FOO=bar"}
	cf.Config.Cmd = []string{"/bin/hello", "a b"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func opener(b []byte) tarball.Opener {
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
}

func TestOpenImageSources(t *testing.T) {
	img := testImage(t)
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	ref := u.Host + "/test/busy:1"
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "v1"})); err != nil {
		t.Fatal(err)
	}
	arch := filepath.Join(t.TempDir(), "img.tar")
	if err := tarball.WriteToFile(arch, r, img); err != nil {
		t.Fatal(err)
	}
	rules, err := ParseAddrRules([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	b := New(nil, nil, nil, nil, WithPull(PullConfig{Allow: rules, ImageDir: filepath.Dir(dir)}))
	for _, ref := range []string{ref, "oci-layout://" + dir + ":v1", "oci-layout://" + dir, "oci-layout://" + dir + "@" + want.String(), "docker-archive://" + arch} {
		got, err := b.openImage(context.Background(), ref)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		d, err := got.Digest()
		if err != nil || (d != want && !strings.HasPrefix(ref, "docker-archive")) {
			t.Errorf("%s: digest %v (%v), want %v", ref, d, err, want)
		}
		root := t.TempDir()
		a := newLayerApplier(root)
		ls, _ := got.Layers()
		for _, l := range ls {
			if err := applyImageLayer(a, l, &imageBudget{left: 1 << 30}); err != nil {
				t.Fatalf("%s: %v", ref, err)
			}
		}
		if read(t, filepath.Join(root, "bin/hello")) != "hi" || exists(filepath.Join(root, "bin/tmp")) {
			t.Errorf("%s: unexpected root filesystem", ref)
		}
	}
	for _, bad := range []string{"oci-layout://" + dir + ":nope", "oci-layout://relative/dir", "docker-archive://rel.tar", u.Host + "/test/missing:1", "UPPER/case:x",
		"oci-layout:///etc", "docker-archive:///etc/passwd", "oci-layout://" + filepath.Dir(dir) + "/../../etc"} {
		if _, err := b.openImage(context.Background(), bad); err == nil {
			t.Errorf("%s accepted", bad)
		} else if _, ok := sandbox.AsUserError(err); !ok {
			t.Errorf("%s: want a user error, got %v", bad, err)
		}
	}
}

func TestInsecureRegistryRefused(t *testing.T) {
	called := false
	rt := guardedTransport{next: roundTripFunc(func(*http.Request) (*http.Response, error) {
		called = true
		return nil, io.EOF
	})}
	req, _ := http.NewRequest(http.MethodGet, "http://10.1.2.3:5000/v2/", nil)
	if _, err := rt.RoundTrip(req); err == nil || called {
		t.Fatalf("plain HTTP to a private address went out (err %v)", err)
	}
	for _, h := range []string{"127.0.0.1:5000", "localhost:5000", "[::1]:5000"} {
		called = false
		req, _ := http.NewRequest(http.MethodGet, "http://"+h+"/v2/", nil)
		_, _ = rt.RoundTrip(req)
		if !called {
			t.Errorf("loopback %s refused", h)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestFixupImageRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (chown of /home/user); run the unit tests as root")
	}
	// musl/busybox-like: no glibc loader, passwd without "user".
	root := t.TempDir()
	write(t, filepath.Join(root, "etc/passwd"), "root:x:0:0:root:/root:/bin/sh", 0o644)
	a := newLayerApplier(root)
	glibc, err := fixupImageRoot(a)
	if err != nil {
		t.Fatal(err)
	}
	if glibc || exists(filepath.Join(root, "etc/ld.so.preload")) {
		t.Error("non-glibc image reported as glibc, or got a preload")
	}
	if u, ok := lookupUser(root, "user"); !ok || u.uid != 1000 || u.gid != 1000 {
		t.Errorf("user account: %+v %v", u, ok)
	}
	if got := read(t, filepath.Join(root, "etc/passwd")); !strings.HasPrefix(got, "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:") {
		t.Errorf("passwd = %q", got)
	}
	for _, d := range []string{"usr/local/bin", "home/user", "tmp"} {
		if fi, err := os.Stat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
			t.Errorf("/%s missing", d)
		}
	}
	// A second run changes nothing (idempotent).
	if _, err := fixupImageRoot(a); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(read(t, filepath.Join(root, "etc/passwd")), "user:x:1000"); n != 1 {
		t.Errorf("user added %d times", n)
	}
	// glibc: the loader (here through a usrmerge symlink) is recognised.
	root = t.TempDir()
	write(t, filepath.Join(root, "usr/lib64/ld-linux-x86-64.so.2"), "", 0o755)
	if err := os.Symlink("usr/lib64", filepath.Join(root, "lib64")); err != nil {
		t.Fatal(err)
	}
	glibc, err = fixupImageRoot(newLayerApplier(root))
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := lookupUser(root, "root"); !ok || r.uid != 0 {
		t.Errorf("image without /etc/passwd: root account %+v %v", r, ok)
	}
	// The statx shim (a preload for gVisor 20221219) is gone.
	if !glibc || exists(filepath.Join(root, "etc/ld.so.preload")) {
		t.Error("glibc image not recognised, or got a preload")
	}
}
