package volume

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// newFiles returns a volume directory inside a parent that also holds a
// secret file next to it, and the volume opened.
func newFiles(t *testing.T) (*Files, string, string) {
	t.Helper()
	parent := t.TempDir()
	dir := filepath.Join(parent, "data")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(parent, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, dir, parent
}

func u32(v uint32) *uint32 { return &v }

func TestCleanPath(t *testing.T) {
	for in, want := range map[string][2]string{
		"/":        {".", "/"},
		"/a/b.txt": {"a/b.txt", "/a/b.txt"},
		"a//b/":    {"a/b", "/a/b"},
		"/./a/.":   {"a", "/a"},
		"//":       {".", "/"},
	} {
		rel, abs, err := CleanPath(in)
		if err != nil || rel != want[0] || abs != want[1] {
			t.Errorf("CleanPath(%q) = %q, %q, %v; want %q, %q", in, rel, abs, err, want[0], want[1])
		}
	}
	for _, bad := range []string{"", "..", "/..", "/a/../../b", "a/..", "/a/\x00b"} {
		if _, _, err := CleanPath(bad); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("CleanPath(%q) = %v, want ErrInvalidPath", bad, err)
		}
	}
}

// TestEscapes: no path, symbolic link (relative, absolute, in a parent
// directory) or rename leads a content operation outside the volume.
func TestEscapes(t *testing.T) {
	f, dir, parent := newFiles(t)
	ctx := context.Background()
	for name, target := range map[string]string{
		"up":      "../secret",
		"abs":     filepath.Join(parent, "secret"),
		"updir":   "..",
		"absroot": "/",
		"etc":     "/etc",
	} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/up", "/abs", "/updir/secret", "/absroot/etc/passwd", "/etc/passwd"} {
		if file, _, err := f.Open(p); err == nil {
			file.Close()
			t.Errorf("Open(%s) succeeded: it reads outside the volume", p)
		} else if !errors.Is(err, ErrEscapes) {
			t.Errorf("Open(%s) = %v, want ErrEscapes", p, err)
		}
	}
	// Writes through links, with and without force, leave the host alone.
	for _, p := range []string{"/updir/new", "/etc/new-file", "/absroot/tmp/new"} {
		for _, force := range []bool{false, true} {
			if _, err := f.Write(ctx, p, strings.NewReader("x"), -1, Owner{}, force); !errors.Is(err, ErrEscapes) {
				t.Errorf("Write(%s, force=%v) = %v, want ErrEscapes", p, force, err)
			}
		}
	}
	if _, err := f.Write(ctx, "/up", strings.NewReader("overwritten"), -1, Owner{}, true); !errors.Is(err, ErrEscapes) {
		t.Errorf("Write over a link to a host file = %v, want ErrEscapes", err)
	}
	if b, _ := os.ReadFile(filepath.Join(parent, "secret")); string(b) != "host secret" {
		t.Fatalf("the host's file changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(parent, "new")); err == nil {
		t.Fatal("a file was created outside the volume")
	}
	for _, p := range []string{"/updir/x", "/etc/x"} {
		if _, err := f.MakeDir(p, Owner{}, true); !errors.Is(err, ErrEscapes) {
			t.Errorf("MakeDir(%s) = %v, want ErrEscapes", p, err)
		}
	}
	if _, err := f.List("/updir", 1); !errors.Is(err, ErrEscapes) {
		t.Errorf("List(/updir) = %v, want ErrEscapes", err)
	}
	if _, err := f.SetMetadata("/updir/secret", Owner{Mode: u32(0o777)}); !errors.Is(err, ErrEscapes) {
		t.Errorf("SetMetadata through a link = %v, want ErrEscapes", err)
	}
	// Stat and Remove act on the link, not on what it names.
	if e, err := f.Stat("/abs"); err != nil || e.Type != "symlink" || e.Target != filepath.Join(parent, "secret") {
		t.Errorf("Stat(/abs) = %+v, %v", e, err)
	}
	if err := f.Remove("/updir"); err != nil {
		t.Errorf("Remove(/updir) = %v", err)
	}
	if err := f.Remove("/"); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("Remove(/) = %v, want ErrInvalidPath", err)
	}
	if _, err := os.Stat(filepath.Join(parent, "secret")); err != nil {
		t.Fatalf("the host's file is gone: %v", err)
	}
}

func TestWriteSemantics(t *testing.T) {
	f, dir, _ := newFiles(t)
	ctx := context.Background()
	if _, err := f.Write(ctx, "/missing/a.txt", strings.NewReader("x"), -1, Owner{}, false); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("write under a missing parent without force = %v, want ErrNotExist", err)
	}
	e, err := f.Write(ctx, "/d1/d2/a.txt", strings.NewReader("hello"), -1, Owner{UID: u32(1234), GID: u32(4321), Mode: u32(0o640)}, true)
	if err != nil || e.Size != 5 || e.Type != "file" || e.UID != 1234 || e.GID != 4321 || e.Mode != 0o640 || e.Path != "/d1/d2/a.txt" || e.Name != "a.txt" {
		t.Fatalf("Write with force = %+v, %v", e, err)
	}
	// Parents made by force get the default mode and the write's owner.
	if d, err := f.Stat("/d1"); err != nil || d.Type != "directory" || d.Mode != DefaultDirMode || d.UID != 1234 {
		t.Fatalf("Stat(/d1) = %+v, %v", d, err)
	}
	if _, err := f.Write(ctx, "/d1/d2/a.txt", strings.NewReader("again"), -1, Owner{}, false); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("write over a file without force = %v, want ErrExist", err)
	}
	if _, err := f.Write(ctx, "/d1", strings.NewReader("x"), -1, Owner{}, true); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("write over a directory = %v, want ErrExist", err)
	}
	if e, err := f.Write(ctx, "/d1/d2/a.txt", strings.NewReader("replaced!"), -1, Owner{}, true); err != nil || e.Size != 9 || e.Mode != DefaultFileMode || e.UID != DefaultUID {
		t.Fatalf("overwrite = %+v, %v", e, err)
	}
	// Past the limit: refused, the old content kept, no temporary file left.
	if _, err := f.Write(ctx, "/d1/d2/a.txt", bytes.NewReader(make([]byte, 1<<20)), 1000, Owner{}, true); !errors.Is(err, ErrFull) {
		t.Fatalf("write past the limit = %v, want ErrFull", err)
	}
	if _, err := f.Write(ctx, "/d1/big", bytes.NewReader(make([]byte, 1<<20)), 1000, Owner{}, false); !errors.Is(err, ErrFull) {
		t.Fatalf("new file past the limit = %v, want ErrFull", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "d1/d2/a.txt")); string(b) != "replaced!" {
		t.Fatalf("a refused overwrite changed the file: %q", b)
	}
	ents, err := f.List("/", 3)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range ents {
		paths = append(paths, e.Path)
	}
	if got := strings.Join(paths, " "); got != "/d1 /d1/d2 /d1/d2/a.txt" {
		t.Fatalf("List(/, 3) = %s (a leftover upload?)", got)
	}
	if ents, err := f.List("/", 1); err != nil || len(ents) != 1 {
		t.Fatalf("List(/, 1) = %+v, %v", ents, err)
	}
	if _, err := f.List("/d1/d2/a.txt", 1); !errors.Is(err, ErrNotDir) {
		t.Fatalf("List(file) = %v, want ErrNotDir", err)
	}
	file, e, err := f.Open("/d1/d2/a.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(file)
	file.Close()
	if string(b) != "replaced!" || e.Size != 9 {
		t.Fatalf("Open read %q, %+v", b, e)
	}
	if _, _, err := f.Open("/d1"); !errors.Is(err, ErrIsDir) {
		t.Fatalf("Open(dir) = %v, want ErrIsDir", err)
	}
	// A FIFO (which a sandbox can make in a mounted volume) is refused at
	// once instead of blocking the reader until a writer comes.
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := f.Open("/fifo"); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrInvalidPath) {
			t.Fatalf("Open(fifo) = %v, want ErrInvalidPath", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Open(fifo) blocked")
	}
}

func TestMakeDirAndMetadata(t *testing.T) {
	f, _, _ := newFiles(t)
	if _, err := f.MakeDir("/a/b", Owner{}, false); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("MakeDir without a parent = %v, want ErrNotExist", err)
	}
	if e, err := f.MakeDir("/a", Owner{Mode: u32(0o700)}, false); err != nil || e.Mode != 0o700 || e.Type != "directory" {
		t.Fatalf("MakeDir(/a) = %+v, %v", e, err)
	}
	if _, err := f.MakeDir("/a", Owner{}, false); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("MakeDir of an existing dir = %v, want ErrExist", err)
	}
	if _, err := f.MakeDir("/a", Owner{}, true); err != nil {
		t.Fatalf("MakeDir of an existing dir with force = %v", err)
	}
	if e, err := f.MakeDir("/a/b/c", Owner{UID: u32(7)}, true); err != nil || e.UID != 7 || e.Mode != DefaultDirMode {
		t.Fatalf("MakeDir with parents = %+v, %v", e, err)
	}
	if _, err := f.Write(context.Background(), "/a/file", strings.NewReader(""), -1, Owner{}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.MakeDir("/a/file", Owner{}, true); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("MakeDir over a file = %v, want ErrExist", err)
	}
	if _, err := f.MakeDir("/a/file/sub", Owner{}, true); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("MakeDir under a file = %v, want ErrExist", err)
	}
	if e, err := f.SetMetadata("/a/file", Owner{UID: u32(5), Mode: u32(0o4755)}); err != nil || e.UID != 5 || e.GID != DefaultGID || e.Mode != 0o4755 {
		t.Fatalf("SetMetadata = %+v, %v", e, err)
	}
	if _, err := f.SetMetadata("/nope", Owner{}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("SetMetadata(missing) = %v", err)
	}
	if err := f.Remove("/a"); err != nil {
		t.Fatal(err)
	}
	if err := f.Remove("/a"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("second Remove = %v, want ErrNotExist", err)
	}
}

func TestDirBacking(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	b, err := NewDirBacking(root)
	if err != nil {
		t.Fatal(err)
	}
	id := "0b5f5d2e-6c11-4b9e-9d0e-0123456789ab"
	if err := b.Create(ctx, id, 5<<20); err != nil {
		t.Fatal(err)
	}
	dir, err := b.Dir(ctx, id)
	if err != nil || dir != filepath.Join(root, id, "data") {
		t.Fatalf("Dir = %s, %v", dir, err)
	}
	if info, err := os.Stat(dir); err != nil || info.Mode().Perm() != 0o777 {
		t.Fatalf("data dir: %v, %v", info.Mode(), err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "f"), filepath.Join(dir, "g")); err != nil {
		t.Fatal(err)
	}
	// A backing that has not seen the writes walks the volume (b's own
	// account, kept since Create, sees them after RewalkAfter).
	walker, err := NewDirBacking(root)
	if err != nil {
		t.Fatal(err)
	}
	used, size, err := walker.Usage(ctx, id)
	if err != nil || size != 5<<20 || used < 1<<20 || used > 1<<20+64<<10 {
		t.Fatalf("Usage = %d, %d, %v (a hard link counted twice?)", used, size, err)
	}
	for _, bad := range []string{"..", "../x", "a/b", ".deleting-x", ""} {
		if _, err := b.Dir(ctx, bad); !errors.Is(err, ErrNotFound) {
			t.Errorf("Dir(%q) = %v, want ErrNotFound", bad, err)
		}
	}
	if err := b.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Dir(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Dir after Delete = %v", err)
	}
	if left, _ := os.ReadDir(root); len(left) != 0 {
		t.Fatalf("left in root after Delete: %v", left)
	}
	if err := b.Delete(ctx, id); err != nil {
		t.Fatalf("second Delete = %v", err)
	}
}
