//go:build linux

package nfs

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gonfs "github.com/willscott/go-nfs"
	nfsc "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"
)

// layout makes <tmp>/outside/secret and the export <tmp>/vol.
func layout(t *testing.T) (top, vol string) {
	t.Helper()
	top = t.TempDir()
	vol = filepath.Join(top, "vol")
	for _, d := range []string{vol, filepath.Join(top, "outside")} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(top, "outside", "secret"), []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	return top, vol
}

func newFS(t *testing.T, dir string, ro bool) *rootFS {
	t.Helper()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return &rootFS{root: r, uid: os.Getuid(), gid: os.Getgid(), readOnly: ro}
}

func TestRootFSConfined(t *testing.T) {
	top, vol := layout(t)
	fs := newFS(t, vol, false)
	// Links that lead out, placed on the host side (as another sandbox
	// writing the volume could).
	for name, target := range map[string]string{
		"abs": filepath.Join(top, "outside"), "rel": "../outside", "deep": "a/../../outside", "root": "/",
	} {
		if err := os.Symlink(target, filepath.Join(vol, name)); err != nil {
			t.Fatal(err)
		}
	}
	escapes := []string{
		"../outside/secret", "/../outside/secret", "a/../../outside/secret",
		"abs/secret", "rel/secret", "deep/secret", "root/etc/passwd",
	}
	for _, p := range escapes {
		if f, err := fs.Open(p); err == nil {
			b, _ := io.ReadAll(f)
			f.Close()
			t.Errorf("Open(%q) read %q out of the volume", p, b)
		}
		if _, err := fs.Stat(p); err == nil {
			t.Errorf("Stat(%q) succeeded", p)
		}
		if _, err := fs.Create(p + "-new"); err == nil {
			t.Errorf("Create(%q) succeeded", p+"-new")
		}
		if err := fs.Rename("x", p); err == nil {
			t.Errorf("Rename to %q succeeded", p)
		}
	}
	if err := fs.MkdirAll("rel/made", 0o755); err == nil {
		t.Error("MkdirAll through a link out succeeded")
	}
	if _, err := os.Stat(filepath.Join(top, "outside", "made")); err == nil {
		t.Error("a directory was made outside the volume")
	}
	if _, err := fs.ReadDir("abs"); err == nil {
		t.Error("ReadDir through an absolute link succeeded")
	}
	// The links themselves are readable as links (the guest resolves them).
	if got, err := fs.Readlink("abs"); err != nil || got != filepath.Join(top, "outside") {
		t.Errorf("Readlink = %q, %v", got, err)
	}
	// Inside the volume everything works, `..` included while it stays in.
	if err := fs.MkdirAll("a/b", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create("a/b/../f")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write([]byte("in"))
	f.Close()
	if b, err := os.ReadFile(filepath.Join(vol, "a", "f")); err != nil || string(b) != "in" {
		t.Errorf("a/f = %q, %v", b, err)
	}
}

func TestRootFSReadOnly(t *testing.T) {
	_, vol := layout(t)
	if err := os.WriteFile(filepath.Join(vol, "f"), []byte("x"), 0o666); err != nil {
		t.Fatal(err)
	}
	fs := newFS(t, vol, true)
	if _, err := fs.OpenFile("f", os.O_RDWR, 0); !errors.Is(err, os.ErrPermission) {
		t.Errorf("OpenFile(O_RDWR) on a read-only export: %v", err)
	}
	for name, err := range map[string]error{
		"Create": func() error { _, err := fs.Create("g"); return err }(),
		"Remove": fs.Remove("f"), "Rename": fs.Rename("f", "g"), "MkdirAll": fs.MkdirAll("d", 0o755),
		"Symlink": fs.Symlink("f", "l"), "Chmod": fs.Chmod("f", 0o777),
	} {
		if err == nil {
			t.Errorf("%s on a read-only export succeeded", name)
		}
	}
	if f, err := fs.Open("f"); err != nil {
		t.Errorf("Open for reading: %v", err)
	} else {
		f.Close()
	}
}

// serve starts a server on loopback for vol and mounts export "/v".
func serve(t *testing.T, vol string) (*Server, *nfsc.Target) {
	t.Helper()
	s, err := Listen(Config{Addr: netip.MustParseAddr("127.0.0.1"), UID: os.Getuid(), GID: os.Getgid()},
		[]Export{{Name: "/v", Dir: vol}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c, err := rpc.DialTCP("tcp", s.Addr().String(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	m := &nfsc.Mount{Client: c}
	if _, err := m.Mount("/other", rpc.AuthNull); err == nil {
		t.Error("mounting an export that is not served succeeded")
	}
	tgt, err := m.Mount("/v", rpc.AuthNull)
	if err != nil {
		t.Fatal(err)
	}
	return s, tgt
}

// TestServerOverRPC drives the server with an NFSv3 client: files go
// through, `..` at the root stays at the root, a lookup through a link
// out fails, handles stay valid across a server restart, and a forged
// handle naming a file outside the export is stale.
func TestServerOverRPC(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("open_by_handle_at needs CAP_DAC_READ_SEARCH (root)")
	}
	top, vol := layout(t)
	s, tgt := serve(t, vol)
	// ACCESS grants what is asked (go-nfs reads the handle before the mask:
	// a handle whose length is not a multiple of 4 garbled the mask to 0,
	// and the Linux client answered EACCES to everything).
	if got, err := tgt.Access("/", 0x3f); err != nil || got != 0x3f {
		t.Fatalf("ACCESS / = %#x, %v; want 0x3f", got, err)
	}
	if _, err := tgt.Create("/hello.txt", 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := tgt.OpenFile("/hello.txt", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("over nfs")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if b, err := os.ReadFile(filepath.Join(vol, "hello.txt")); err != nil || string(b) != "over nfs" {
		t.Fatalf("host reads %q, %v", b, err)
	}
	if _, _, err := tgt.Lookup("/../outside/secret", false); err == nil {
		t.Error("lookup of ../outside/secret succeeded")
	}
	if err := os.Symlink(filepath.Join(top, "outside"), filepath.Join(vol, "out")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tgt.Lookup("/out/secret", false); err == nil {
		t.Error("lookup through a link out succeeded")
	}
	_, fh, err := tgt.Lookup("/hello.txt", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(fh)%4 != 0 {
		t.Errorf("handle of %d bytes, not a multiple of 4", len(fh))
	}
	if got, err := tgt.Access("/hello.txt", 0x3f); err != nil || got != 0x3f {
		t.Errorf("ACCESS /hello.txt = %#x, %v; want 0x3f", got, err)
	}

	// A new server (a restored VM, a restarted daemon) knows the old handle.
	s.Close()
	s2, err := Listen(Config{Addr: netip.MustParseAddr("127.0.0.1"), UID: os.Getuid(), GID: os.Getgid()},
		[]Export{{Name: "/v", Dir: vol}})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	fsys, p, err := s2.h.FromHandle(fh)
	if err != nil || strings.Join(p, "/") != "hello.txt" || fsys == nil {
		t.Fatalf("old handle on a new server: %v %v", p, err)
	}

	// A forged handle: the kernel handle of a file outside the export, on
	// the same file system, in the server's format.
	h := s2.h
	outFS := &rootFS{root: mustRoot(t, top)}
	forged := h.ToHandle(h.exports[0].fs, []string{"hello.txt"})
	real := (&handler{exports: []*export{{fs: outFS, handle: mustPath(t, top)}}}).ToHandle(outFS, []string{"outside", "secret"})
	if forged == nil || real == nil {
		t.Fatal("no handles")
	}
	copy(real[:2], forged[:2]) // export index of the served export
	if _, p, err := h.FromHandle(real); err == nil {
		t.Errorf("a handle of a file outside the export resolved to %v", p)
	} else if se, ok := err.(*gonfs.NFSStatusError); !ok || se.NFSStatus != gonfs.NFSStatusStale {
		t.Errorf("forged handle: %v, want stale", err)
	}
	if _, _, err := h.FromHandle([]byte{1, 9, 0, 0, 0, 0, 0, 0}); err == nil {
		t.Error("a handle of an unknown export resolved")
	}
}

func mustRoot(t *testing.T, dir string) *os.Root {
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func mustPath(t *testing.T, dir string) *os.File {
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
