//go:build linux

package volume

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/airlock-sandbox/airlock/internal/artifacts/s3test"
)

func serverBucket(s *s3test.Server) *Bucket {
	b := &Bucket{Endpoint: "http://" + s.Endpoint, Bucket: s.Bucket, Prefix: "vol", Region: s.Region,
		AccessKeyID: s.AccessKey, SecretAccessKey: s.SecretKey, PathStyle: true}
	if err := b.Normalize(); err != nil {
		panic(err)
	}
	return b
}

// TestCheckBucket runs the create's check against a real S3 server: the
// good bucket passes, and each refusal is a BucketError in the store's
// words.
func TestCheckBucket(t *testing.T) {
	s := s3test.StartT(t)
	ctx := context.Background()
	allow := &BucketDialer{AllowPrivate: true}
	if err := CheckBucket(ctx, serverBucket(s), allow, 0); err != nil {
		t.Fatalf("CheckBucket(good) = %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Bucket)
		want string
	}{
		{"wrong secret", func(b *Bucket) { b.SecretAccessKey = "wrong-secret-key" }, "SignatureDoesNotMatch"},
		{"unknown key", func(b *Bucket) { b.AccessKeyID = "nobody" }, "refused the credentials"},
		{"unknown bucket", func(b *Bucket) { b.Bucket = "no-such-bucket" }, "NoSuchBucket"},
		{"unreachable", func(b *Bucket) { b.Endpoint = "http://127.0.0.1:1" }, "unreachable"},
	} {
		b := serverBucket(s)
		tc.edit(b)
		err := CheckBucket(ctx, b, allow, 5*time.Second)
		var be *BucketError
		if !errors.As(err, &be) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: CheckBucket = %v, want a BucketError with %q", tc.name, err, tc.want)
		}
	}
	// Without the operator's flag, the loopback server is refused.
	if err := CheckBucket(ctx, serverBucket(s), &BucketDialer{}, 0); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("CheckBucket(loopback, not allowed) = %v", err)
	}
}

type fakeInner struct{ Backing }

func atoi(t *testing.T, raw []byte) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func waitFor(d time.Duration, f func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if f() {
			return true
		}
	}
	return false
}

func (fakeInner) Delete(context.Context, string) error { return ErrNotFound }

// TestBucketsMount mounts a bucket with s3fs: writes become objects,
// objects show as files, the passwd file is gone once mounted, a dead
// server fails reads with EIO in bounded time, and Delete takes the mount
// down without touching the objects.
func TestBucketsMount(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("bucket volumes need /dev/fuse: %v", err)
	}
	s := s3test.StartT(t)
	ctx := context.Background()
	const id = "0b5c1d2e-1111-4222-8333-944455556666"
	const roID = "0b5c1d2e-1111-4222-8333-944455557777"
	bk := serverBucket(s)
	ro := *bk
	ro.ReadOnly = true
	root := t.TempDir()
	var gone sync.Map // volume ids whose record is deleted
	b, err := NewBuckets(root, fakeInner{}, func(_ context.Context, v string) (*Bucket, error) {
		if _, ok := gone.Load(v); ok {
			return nil, ErrNotFound
		}
		switch v {
		case id:
			return bk, nil
		case roID:
			return &ro, nil
		}
		return nil, nil
	}, &BucketDialer{AllowPrivate: true}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	b.MountTimeout = 15 * time.Second
	t.Cleanup(func() { _ = b.Close() })
	for _, v := range []string{id, roID} {
		if err := b.Create(ctx, v, 0); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := b.Dir(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "keys")); len(ents) != 0 {
		t.Fatalf("passwd files left after the mount: %v", ents)
	}
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("from the mount"), 0o644); err != nil {
		t.Fatal(err)
	}
	client, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	obj, err := client.GetObject(ctx, s.Bucket, "vol/hello.txt", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	if err != nil || string(got) != "from the mount" {
		t.Fatalf("object vol/hello.txt = %q, %v", got, err)
	}
	if _, err := client.PutObject(ctx, s.Bucket, "vol/sub/put.txt", bytes.NewReader([]byte("from s3")), 7, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "sub", "put.txt")); err != nil || string(got) != "from s3" {
		t.Fatalf("reading a put object through the mount: %q, %v", got, err)
	}
	// The content API's Files on a bucket (no hard links): a create
	// without force, then the name is taken.
	files, err := OpenFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := files.Write(ctx, "/api.txt", strings.NewReader("via files"), -1, Owner{}, false); err != nil {
		t.Fatalf("Files.Write on a bucket: %v", err)
	}
	if _, err := files.Write(ctx, "/api.txt", strings.NewReader("again"), -1, Owner{}, false); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second Files.Write without force: %v, want ErrExist", err)
	}
	files.Close()
	if got, err := os.ReadFile(filepath.Join(dir, "api.txt")); err != nil || string(got) != "via files" {
		t.Fatalf("api.txt = %q, %v", got, err)
	}

	// A second Dir finds the mount and answers at once.
	if d2, err := b.Dir(ctx, id); err != nil || d2 != dir {
		t.Fatalf("second Dir = %s, %v", d2, err)
	}
	// A daemon restart: a new Buckets on the same root finds the live
	// mount and keeps it (sandboxes bind it).
	pid, _ := os.ReadFile(filepath.Join(root, "run", id+".pid"))
	b2, err := NewBuckets(root, fakeInner{}, b.Lookup, b.Dialer, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if d2, err := b2.Dir(ctx, id); err != nil || d2 != dir {
		t.Fatalf("Dir after a restart = %s, %v", d2, err)
	}
	if pid2, _ := os.ReadFile(filepath.Join(root, "run", id+".pid")); !bytes.Equal(pid, pid2) {
		t.Fatalf("a restart mounted again (s3fs pid %s, was %s)", pid2, pid)
	}
	// Its s3fs dies: the next Dir mounts it again.
	if err := syscall.Kill(atoi(t, pid), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !waitFor(5*time.Second, func() bool { _, err := os.Stat(dir); return errors.Is(err, syscall.ENOTCONN) }) {
		t.Fatal("the killed s3fs's mount did not go dead")
	}
	if d2, err := b2.Dir(ctx, id); err != nil || d2 != dir {
		t.Fatalf("Dir after s3fs died = %s, %v", d2, err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "hello.txt")); err != nil || string(got) != "from the mount" {
		t.Fatalf("read after the remount: %q, %v", got, err)
	}

	// Read-only: s3fs refuses writes.
	rdir, err := b.Dir(ctx, roID)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(rdir, "hello.txt")); err != nil || string(got) != "from the mount" {
		t.Fatalf("read-only mount read: %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(rdir, "no.txt"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write on a read-only bucket: %v, want EROFS", err)
	}
	if _, _, err := b.Usage(ctx, id); err != nil {
		t.Fatal(err)
	}
	// The read-only volume is deleted through another node: the sweep
	// takes its mount down here.
	if err := b.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if typ, _ := mountType(rdir); typ != "fuse.s3fs" {
		t.Fatalf("Sweep took down a live volume's mount (%q)", typ)
	}
	gone.Store(roID, true)
	if err := b.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(rdir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after Sweep of a deleted volume, its mount point: %v", err)
	}

	// The server goes away: a read fails with EIO, bounded; Dir (a stat
	// of the root, which s3fs answers from memory) stays quick.
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = os.ReadFile(filepath.Join(dir, "hello.txt"))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read with the server down: %v, want EIO", err)
	}
	t.Logf("read with the server down: %v after %v", err, time.Since(start))
	start = time.Now()
	if _, err := b.Dir(ctx, id); err != nil || time.Since(start) > 2*time.Second {
		t.Fatalf("Dir with the server down: %v after %v", err, time.Since(start))
	}
	if err := s.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "hello.txt")); err != nil || string(got) != "from the mount" {
		t.Fatalf("read after the server came back: %q, %v", got, err)
	}

	// Delete: the mount goes (ENOTCONN through a held descriptor), the
	// objects stay.
	held, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := b.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if typ, _ := mountType(dir); typ != "" {
		t.Fatalf("after Delete, %s is still a %s mount", dir, typ)
	}
	if _, err := held.Readdirnames(-1); err == nil {
		t.Fatal("a descriptor held on the deleted mount still lists it")
	}
	if _, err := client.StatObject(ctx, s.Bucket, "vol/hello.txt", minio.StatObjectOptions{}); err != nil {
		t.Fatalf("the bucket's object is gone after Delete: %v", err)
	}
	// A plain volume's Delete goes to Inner.
	if err := b.Delete(ctx, "0b5c1d2e-1111-4222-8333-000000000000"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delete of a non-bucket volume = %v, want Inner's answer", err)
	}
}
