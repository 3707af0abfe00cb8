//go:build linux

package nfs

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	gonfs "github.com/willscott/go-nfs"
	"golang.org/x/sys/unix"
)

// withoutKernelHandles makes every export look like a FUSE mount without
// file handles (as a bucket volume's s3fs), for the test.
func withoutKernelHandles(t *testing.T) {
	t.Helper()
	old := kernelHandles
	kernelHandles = func(*os.File) error { return unix.EOPNOTSUPP }
	t.Cleanup(func() { kernelHandles = old })
}

func tableHandler(t *testing.T, vol, state string) *handler {
	t.Helper()
	h, err := newHandler([]Export{{Name: "/volume-0", Dir: vol}}, os.Getuid(), os.Getgid(), state)
	if err != nil {
		t.Fatal(err)
	}
	if h.exports[0].fs.table == nil {
		t.Fatal("no path table for an export without kernel handles")
	}
	return h
}

func isStale(err error) bool {
	var se *gonfs.NFSStatusError
	return errors.As(err, &se) && se.NFSStatus == gonfs.NFSStatusStale
}

func TestPathTableHandles(t *testing.T) {
	withoutKernelHandles(t)
	top, vol := layout(t)
	state := t.TempDir()
	if err := os.MkdirAll(filepath.Join(vol, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "d", "e", "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(top, "outside"), filepath.Join(vol, "out")); err != nil {
		t.Fatal(err)
	}
	h := tableHandler(t, vol, state)
	fs := h.exports[0].fs
	root := h.ToHandle(fs, []string{})
	fh := h.ToHandle(fs, []string{"d", "e", "f"})
	dh := h.ToHandle(fs, []string{"d"})
	for _, b := range [][]byte{root, fh, dh} {
		if len(b) == 0 || len(b)%4 != 0 {
			t.Fatalf("handle %x: want a non-empty multiple of 4 bytes", b)
		}
	}
	if again := h.ToHandle(fs, []string{"d", "e", "f"}); string(again) != string(fh) {
		t.Error("the same path got two handles")
	}
	if _, p, err := h.FromHandle(root); err != nil || len(p) != 0 {
		t.Errorf("root handle: %v %v", p, err)
	}
	if _, p, err := h.FromHandle(fh); err != nil || !reflect.DeepEqual(p, []string{"d", "e", "f"}) {
		t.Errorf("file handle: %v %v", p, err)
	}

	// The fileid (inode number) is the handle's: it lasts while the path
	// keeps its handle, whatever the file system's inode numbers do.
	st, err := fs.Stat("d/e/f")
	if err != nil {
		t.Fatal(err)
	}
	ino := st.Sys().(*syscall.Stat_t).Ino
	if want := binary.LittleEndian.Uint64(fh[4:12]); ino != want {
		t.Errorf("fileid %x, want %x (from the handle)", ino, want)
	}

	// Forged and stale handles.
	forged := append([]byte(nil), fh...)
	forged[10] ^= 0xff
	bad := [][]byte{forged, {tableHandleVersion, 1, 0, 0}, append([]byte{tableHandleVersion, 7, 0, 0}, fh[4:]...), fh[:len(fh)-4]}
	for _, b := range bad {
		if _, _, err := h.FromHandle(b); !isStale(err) {
			t.Errorf("forged handle %x: %v, want stale", b, err)
		}
	}
	// A path that leads out through a link: the handle names the link,
	// whose use goes through the os.Root.
	oh := h.ToHandle(fs, []string{"out", "secret"})
	if _, _, err := h.FromHandle(oh); !isStale(err) {
		t.Errorf("handle through a link out of the volume: %v, want stale", err)
	}
	if oh := h.ToHandle(fs, []string{"..", "outside", "secret"}); oh != nil {
		if _, p, err := h.FromHandle(oh); err == nil {
			t.Errorf("handle for ../outside/secret resolves to %v", p)
		}
	}

	// Rename of a directory keeps the handles below it; remove makes one stale.
	if err := fs.Rename("d", "g"); err != nil {
		t.Fatal(err)
	}
	if _, p, err := h.FromHandle(fh); err != nil || !reflect.DeepEqual(p, []string{"g", "e", "f"}) {
		t.Errorf("after rename: %v %v", p, err)
	}
	if fis, err := fs.ReadDir("g/e"); err != nil || len(fis) != 1 || fis[0].Sys().(*syscall.Stat_t).Ino != ino {
		t.Errorf("renamed file's fileid changed: %v %v", fis, err)
	}
	if _, p, err := h.FromHandle(dh); err != nil || !reflect.DeepEqual(p, []string{"g"}) {
		t.Errorf("renamed dir: %v %v", p, err)
	}
	if err := fs.Remove("g/e/f"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.FromHandle(fh); !isStale(err) {
		t.Errorf("removed file's handle: %v, want stale", err)
	}
	eh := h.ToHandle(fs, []string{"g", "e"})
	h.close()

	// A later server (a restored VM, a restarted daemon) keeps the handles.
	h2 := tableHandler(t, vol, state)
	defer h2.close()
	if _, p, err := h2.FromHandle(eh); err != nil || !reflect.DeepEqual(p, []string{"g", "e"}) {
		t.Errorf("after a restart: %v %v", p, err)
	}
	if _, p, err := h2.FromHandle(dh); err != nil || !reflect.DeepEqual(p, []string{"g"}) {
		t.Errorf("renamed dir after a restart: %v %v", p, err)
	}
	if _, _, err := h2.FromHandle(fh); !isStale(err) {
		t.Errorf("removed file after a restart: %v, want stale", err)
	}
}

// A table file edited to name paths outside the export (or garbage) gives
// no handle to them.
func TestPathTableForgedFile(t *testing.T) {
	withoutKernelHandles(t)
	_, vol := layout(t)
	state := t.TempDir()
	h := tableHandler(t, vol, state)
	good := h.ToHandle(h.exports[0].fs, []string{})
	h.close()
	file := filepath.Join(state, "nfs-handles-0")
	var lines []string
	for i, p := range []string{"../outside/secret", "/etc/passwd", "a/../../outside", "../outside"} {
		id := strings.Repeat(string(rune('a'+i)), 2*idLen)
		lines = append(lines, "+"+id+" \""+p+"\"")
	}
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(strings.Join(lines, "\n") + "\n+zz garbage\n")
	f.Close()
	h2 := tableHandler(t, vol, state)
	defer h2.close()
	if len(h2.exports[0].fs.table.byID) != 1 {
		t.Errorf("table holds %v, want only the root", h2.exports[0].fs.table.byID)
	}
	if _, _, err := h2.FromHandle(good); err != nil {
		t.Errorf("root handle after reload: %v", err)
	}
}

// An export whose directory is missing is an ExportError naming its index.
func TestExportErrorIndex(t *testing.T) {
	_, vol := layout(t)
	_, err := newHandler([]Export{{Name: "/volume-0", Dir: vol}, {Name: "/volume-1", Dir: filepath.Join(vol, "nope")}}, 0, 0, "")
	var ee *ExportError
	if !errors.As(err, &ee) || ee.Index != 1 {
		t.Fatalf("err = %v, want an ExportError for export 1", err)
	}
}
