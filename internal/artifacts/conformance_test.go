package artifacts_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
	"github.com/airlock-sandbox/airlock/internal/artifacts/s3test"
)

// env is one backend under test.
type env struct {
	backend artifacts.Backend
	// cut makes the backend unreachable; heal undoes it.
	cut, heal func(t *testing.T)
	// corrupt replaces the bytes of key behind the backend's back, keeping
	// its recorded digest.
	corrupt func(t *testing.T, key string)
	// parts reports how many parts key was uploaded in (0: not known).
	parts func(t *testing.T, key string) int
	// leftovers lists unfinished uploads (S3 multipart) under the backend.
	leftovers func(t *testing.T) []string
}

func newLocalEnv(t *testing.T) *env {
	root := filepath.Join(t.TempDir(), "store")
	b, err := artifacts.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	away := root + ".away"
	return &env{
		backend: b,
		cut: func(t *testing.T) {
			if err := os.Rename(root, away); err != nil {
				t.Fatal(err)
			}
		},
		heal: func(t *testing.T) {
			if err := os.Rename(away, root); err != nil {
				t.Fatal(err)
			}
		},
		corrupt: func(t *testing.T, key string) {
			p := filepath.Join(root, filepath.FromSlash(key))
			os.Chmod(p, 0o644)
			if err := os.WriteFile(p, []byte("corrupted"), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		parts:     func(*testing.T, string) int { return 0 },
		leftovers: func(*testing.T) []string { return nil },
	}
}

// sharedS3: one server per test binary (s3test.Shared) for the subtests that do not stop
// it; each of those gets its own key prefix.
func sharedS3(t *testing.T) *s3test.Server { return s3test.Shared(t) }

func TestMain(m *testing.M) { os.Exit(s3test.RunMain(m)) }

func newS3Env(t *testing.T, srv *s3test.Server) *env {
	prefix := "t/" + strings.NewReplacer("/", "-", "#", "-").Replace(t.Name())
	cfg := artifacts.S3Config{
		Endpoint: "http://" + srv.Endpoint, Bucket: srv.Bucket, Prefix: prefix, Region: srv.Region,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
		PartSize: 5 << 20, MaxRetries: 1,
	}
	b, err := artifacts.NewS3(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	return &env{
		backend: b,
		cut: func(t *testing.T) {
			if err := srv.Pause(); err != nil {
				t.Fatal(err)
			}
		},
		heal: func(t *testing.T) {
			if err := srv.Resume(ctx); err != nil {
				t.Fatal(err)
			}
		},
		corrupt: func(t *testing.T, key string) {
			// On the server's disk, in place: the recorded digest and
			// the server's own checksums (xattrs) stay as they were.
			p := srv.ObjectPath(prefix + "/" + key)
			if _, err := os.Stat(p); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("corrupted"), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		parts: func(t *testing.T, key string) int {
			oi, err := client.StatObject(ctx, srv.Bucket, prefix+"/"+key, minio.StatObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// A multipart object's ETag is "<md5 of the part md5s>-<parts>".
			etag := strings.Trim(oi.ETag, `"`)
			if i := strings.LastIndex(etag, "-"); i >= 0 {
				n := 0
				for _, c := range etag[i+1:] {
					n = n*10 + int(c-'0')
				}
				return n
			}
			return 1
		},
		leftovers: func(t *testing.T) []string {
			var out []string
			for u := range client.ListIncompleteUploads(ctx, srv.Bucket, prefix+"/", true) {
				if u.Err != nil {
					t.Fatal(u.Err)
				}
				out = append(out, u.Key)
			}
			return out
		},
	}
}

// backends runs f against every backend.
func backends(t *testing.T, f func(t *testing.T, e *env)) {
	t.Run("local", func(t *testing.T) { f(t, newLocalEnv(t)) })
	t.Run("s3", func(t *testing.T) { f(t, newS3Env(t, sharedS3(t))) })
}

// countingBackend counts downloads.
type countingBackend struct {
	artifacts.Backend
	opens atomic.Int32
}

func (c *countingBackend) Open(ctx context.Context, key string) (io.ReadCloser, artifacts.Info, error) {
	c.opens.Add(1)
	return c.Backend.Open(ctx, key)
}

func newStore(t *testing.T, b artifacts.Backend) *artifacts.Store {
	s, err := artifacts.NewStore(b, filepath.Join(t.TempDir(), "cache"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func randBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, p string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func TestFileRoundTrip(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		s := newStore(t, e.backend)
		data := randBytes(t, 100<<10)
		src := filepath.Join(t.TempDir(), "f")
		writeFile(t, src, data, 0o600)
		info, err := s.PutFile(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		if info.Digest != artifacts.DigestOf(data) || info.Size != int64(len(data)) || info.Key != artifacts.BlobKey(info.Digest) {
			t.Fatalf("PutFile = %+v, want key %s size %d", info, artifacts.BlobKey(artifacts.DigestOf(data)), len(data))
		}
		if ok, err := s.Exists(ctx, info.Key); !ok || err != nil {
			t.Fatalf("Exists = %v, %v after PutFile", ok, err)
		}
		p, err := s.Get(ctx, info.Key)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(p)
		if !bytes.Equal(got, data) {
			t.Fatalf("Get returned %d bytes that differ from the %d put", len(got), len(data))
		}
		if fi, _ := os.Stat(p); fi.Mode().Perm()&0o222 != 0 {
			t.Errorf("cached copy is writable: %v", fi.Mode())
		}
		// A second PutFile of the same content is a no-op with the same key.
		again, err := s.PutFile(ctx, src)
		if err != nil || again.Key != info.Key {
			t.Fatalf("second PutFile = %+v, %v", again, err)
		}
	})
}

func TestLargeFileMultipart(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		s := newStore(t, e.backend)
		const size = 23<<20 + 12345 // 5 parts of 5 MiB, the last one short
		data := randBytes(t, size)
		src := filepath.Join(t.TempDir(), "big")
		writeFile(t, src, data, 0o600)
		info, err := s.PutFile(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		parts := e.parts(t, info.Key)
		t.Logf("%d-byte object stored in %d parts (0: the backend has none)", size, parts)
		if parts != 0 && parts < 2 {
			t.Fatalf("a %d-byte object went up in %d part(s), want multipart", size, parts)
		}
		p, err := s.Get(ctx, info.Key)
		if err != nil {
			t.Fatal(err)
		}
		f, _ := os.Open(p)
		d, n, _ := artifacts.DigestReader(f)
		f.Close()
		if d != artifacts.DigestOf(data) || n != size {
			t.Fatalf("Get: %d bytes hashing to %s, want %d hashing to %s", n, d, size, artifacts.DigestOf(data))
		}
		// A stream of unknown length (a packed tree, say) takes the same path.
		key := "refs/big-stream"
		if _, err := s.Put(ctx, key, bytes.NewReader(data), -1, artifacts.DigestOf(data)); err != nil {
			t.Fatal(err)
		}
		if st, err := s.Stat(ctx, key); err != nil || st.Size != size || st.Digest != artifacts.DigestOf(data) {
			t.Fatalf("Stat = %+v, %v", st, err)
		}
		if left := e.leftovers(t); len(left) > 0 {
			t.Fatalf("unfinished uploads left: %v", left)
		}
	})
}

func TestDigestMismatchLeavesNothing(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		s := newStore(t, e.backend)
		wrong := artifacts.DigestOf([]byte("something else"))
		for _, c := range []struct {
			name string
			size int
			len  int64 // announced; -1 unknown
		}{{"small", 1000, 1000}, {"small-unknown-length", 1000, -1}, {"multipart", 12 << 20, 12 << 20}, {"multipart-unknown-length", 12 << 20, -1}} {
			data := randBytes(t, c.size)
			key := "refs/mismatch-" + c.name
			_, err := s.Put(ctx, key, bytes.NewReader(data), c.len, wrong)
			if !errors.Is(err, artifacts.ErrDigestMismatch) {
				t.Fatalf("%s: Put with a wrong digest = %v, want ErrDigestMismatch", c.name, err)
			}
			if ok, err := s.Exists(ctx, key); ok || err != nil {
				t.Fatalf("%s: after a rejected Put, Exists = %v, %v; want false", c.name, ok, err)
			}
			// A short body against its announced length is rejected too.
			if c.len > 0 {
				_, err := s.Put(ctx, key, bytes.NewReader(data[:c.size-1]), c.len, artifacts.DigestOf(data[:c.size-1]))
				if !errors.Is(err, artifacts.ErrDigestMismatch) {
					t.Fatalf("%s: Put of a short body = %v, want ErrDigestMismatch", c.name, err)
				}
			}
		}
		// An object already under a key survives a rejected overwrite.
		good := []byte("good content")
		if _, err := s.Put(ctx, "refs/keep", bytes.NewReader(good), int64(len(good)), artifacts.DigestOf(good)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, "refs/keep", strings.NewReader("bad"), 3, wrong); !errors.Is(err, artifacts.ErrDigestMismatch) {
			t.Fatalf("overwrite with a wrong digest = %v", err)
		}
		if p, err := s.GetRef(ctx, "refs/keep", artifacts.DigestOf(good)); err != nil {
			t.Fatal(err)
		} else if b, _ := os.ReadFile(p); !bytes.Equal(b, good) {
			t.Fatalf("refs/keep holds %q after a rejected overwrite", b)
		}
		// A content-addressed key must name the digest given.
		d := artifacts.DigestOf(good)
		if _, err := s.Put(ctx, artifacts.BlobKey(d), bytes.NewReader(good), -1, wrong); !errors.Is(err, artifacts.ErrDigestMismatch) {
			t.Fatalf("Put under another digest's key = %v", err)
		}
		if left := e.leftovers(t); len(left) > 0 {
			t.Fatalf("unfinished uploads left: %v", left)
		}
	})
}

func TestGetRejectsCorruptObject(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		s := newStore(t, e.backend)
		data := randBytes(t, 4096)
		src := filepath.Join(t.TempDir(), "f")
		writeFile(t, src, data, 0o600)
		info, err := s.PutFile(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		e.corrupt(t, info.Key)
		if _, err := s.Get(ctx, info.Key); !errors.Is(err, artifacts.ErrDigestMismatch) || !strings.Contains(err.Error(), "removed") {
			t.Fatalf("Get of a corrupted object = %v, want ErrDigestMismatch saying it was removed", err)
		}
		assertCacheClean(t, s, nil)
		// The corrupted object is gone, so a put uploads it again
		// (instead of trusting its recorded digest) and Get works.
		if ok, err := s.Exists(ctx, info.Key); ok || err != nil {
			t.Fatalf("after the failed Get: Exists = %v, %v; want the corrupted object removed", ok, err)
		}
		if _, err := s.PutFile(ctx, src); err != nil {
			t.Fatal(err)
		}
		p, err := s.Get(ctx, info.Key)
		if err != nil {
			t.Fatalf("Get after re-put: %v", err)
		}
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get after re-put returned other bytes (%v)", err)
		}
		assertCacheClean(t, s, []string{info.Digest.Hex()})
	})
}

// A corrupted tree: GetDir refuses it as a digest mismatch (the decoder
// fails first), leaves nothing in the cache, removes the object, and the
// next PutDir stores it again.
func TestGetDirRejectsCorruptTree(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		s := newStore(t, e.backend)
		src := t.TempDir()
		writeFile(t, filepath.Join(src, "a"), randBytes(t, 100<<10), 0o600)
		writeFile(t, filepath.Join(src, "d", "b"), []byte("hello\n"), 0o644)
		info, err := s.PutDir(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		e.corrupt(t, info.Key)
		if _, err := s.GetDir(ctx, info.Key); !errors.Is(err, artifacts.ErrDigestMismatch) || !strings.Contains(err.Error(), "removed") {
			t.Fatalf("GetDir of a corrupted tree = %v, want ErrDigestMismatch saying it was removed", err)
		}
		assertCacheClean(t, s, nil)
		if ents, err := os.ReadDir(filepath.Join(s.CacheDir(), "trees")); err != nil || len(ents) != 0 {
			t.Fatalf("cache trees after a failed GetDir: %v, %v", ents, err)
		}
		if ok, err := s.Exists(ctx, info.Key); ok || err != nil {
			t.Fatalf("after the failed GetDir: Exists = %v, %v; want the corrupted tree removed", ok, err)
		}
		if _, err := s.PutDir(ctx, src); err != nil {
			t.Fatal(err)
		}
		dir, err := s.GetDir(ctx, info.Key)
		if err != nil {
			t.Fatalf("GetDir after re-put: %v", err)
		}
		if got, err := os.ReadFile(filepath.Join(dir, "d", "b")); err != nil || string(got) != "hello\n" {
			t.Fatalf("GetDir after re-put: d/b = %q, %v", got, err)
		}
	})
}

// TestS3SendsChecksumTrailer checks every unsigned upload request carries a
// CRC32C the server checks (minio-go sends one only with TrailingHeaders).
func TestS3SendsChecksumTrailer(t *testing.T) {
	srv := sharedS3(t)
	target, err := url.Parse("http://" + srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var puts, missing []string
	var flip atomic.Bool // damage a byte of each upload body on the way
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.ContentLength != 0 {
			mu.Lock()
			puts = append(puts, r.URL.Path)
			// A streamed body carries it in a trailer, a buffered part
			// in a header.
			if !strings.EqualFold(r.Header.Get("X-Amz-Trailer"), "x-amz-checksum-crc32c") && r.Header.Get("X-Amz-Checksum-Crc32c") == "" {
				missing = append(missing, r.URL.RequestURI())
			}
			if flip.Load() {
				r.Body = &flipReader{r.Body, 100}
			}
			mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	b, err := artifacts.NewS3(artifacts.S3Config{
		Endpoint: proxy.URL, Bucket: srv.Bucket, Prefix: "t/trailer", Region: srv.Region,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PartSize: 5 << 20, MaxRetries: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, n := range []int{4096, 11 << 20} { // one PUT; multipart
		data := randBytes(t, n)
		d := artifacts.DigestOf(data)
		if _, err := b.Put(ctx, artifacts.BlobKey(d), bytes.NewReader(data), int64(n), d); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	if len(puts) < 4 {
		t.Fatalf("saw %d upload requests, want at least 4: %v", len(puts), puts)
	}
	if len(missing) > 0 {
		t.Fatalf("upload requests without a CRC32C: %v", missing)
	}
	mu.Unlock()
	// A body damaged in transit is refused by the server (the recorded
	// SHA-256 is right, so Put's own Stat would not notice).
	flip.Store(true)
	for _, n := range []int{4096, 11 << 20} {
		data := randBytes(t, n)
		d := artifacts.DigestOf(data)
		if _, err := b.Put(ctx, artifacts.BlobKey(d), bytes.NewReader(data), int64(n), d); err == nil {
			t.Fatalf("Put of %d bytes damaged in transit succeeded", n)
		}
		if _, err := b.Stat(ctx, artifacts.BlobKey(d)); !errors.Is(err, artifacts.ErrNotFound) {
			t.Fatalf("after a Put damaged in transit: Stat = %v, want ErrNotFound", err)
		}
	}
}

// flipReader inverts the byte at offset at.
type flipReader struct {
	io.ReadCloser
	at int64 // offset of the next Read's first byte, minus the target's
}

func (f *flipReader) Read(p []byte) (int, error) {
	n, err := f.ReadCloser.Read(p)
	if f.at >= 0 && f.at < int64(n) {
		p[f.at] ^= 0xff
	}
	f.at -= int64(n)
	return n, err
}

func TestConcurrentGetDownloadsOnce(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		cb := &countingBackend{Backend: e.backend}
		s := newStore(t, cb)
		data := randBytes(t, 8<<20)
		src := filepath.Join(t.TempDir(), "f")
		writeFile(t, src, data, 0o600)
		info, err := s.PutFile(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		tree := filepath.Join(t.TempDir(), "tree")
		writeFile(t, filepath.Join(tree, "a/b"), data[:1<<20], 0o644)
		tinfo, err := s.PutDir(ctx, tree)
		if err != nil {
			t.Fatal(err)
		}
		const n = 8
		var wg sync.WaitGroup
		paths := make([]string, 2*n)
		errs := make([]error, 2*n)
		for i := 0; i < n; i++ {
			wg.Add(2)
			go func() { defer wg.Done(); paths[i], errs[i] = s.Get(ctx, info.Key) }()
			go func() { defer wg.Done(); paths[n+i], errs[n+i] = s.GetDir(ctx, tinfo.Key) }()
		}
		wg.Wait()
		for i := range paths {
			if errs[i] != nil {
				t.Fatalf("Get %d: %v", i, errs[i])
			}
			if want := paths[(i/n)*n]; paths[i] != want {
				t.Fatalf("Get %d returned %s, another %s", i, paths[i], want)
			}
		}
		if got := cb.opens.Load(); got != 2 {
			t.Fatalf("%d concurrent Gets of 2 keys opened the backend %d times, want 2", 2*n, got)
		}
		if b, _ := os.ReadFile(filepath.Join(paths[n], "a/b")); !bytes.Equal(b, data[:1<<20]) {
			t.Fatal("GetDir's tree differs")
		}
		// Cached: no more downloads.
		if _, err := s.Get(ctx, info.Key); err != nil {
			t.Fatal(err)
		}
		if got := cb.opens.Load(); got != 2 {
			t.Fatalf("a cached Get opened the backend (%d opens)", got)
		}
	})
}

func TestExistsListDelete(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		s := newStore(t, e.backend)
		put := func(key, content string) {
			t.Helper()
			if _, err := s.Put(ctx, key, strings.NewReader(content), int64(len(content)), artifacts.DigestOf([]byte(content))); err != nil {
				t.Fatal(err)
			}
		}
		put("snapshots/s1/manifest", "one")
		put("snapshots/s2/manifest", "two")
		put("snapshots/s10/manifest", "ten")
		put("templates/abc", "tmpl")
		list := func(prefix string) []string {
			t.Helper()
			infos, err := s.List(ctx, prefix)
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, i := range infos {
				keys = append(keys, i.Key)
				if i.Digest.Validate() != nil || i.Size <= 0 {
					t.Errorf("List entry %+v lacks a digest or size", i)
				}
			}
			return keys
		}
		if got, want := strings.Join(list("snapshots/"), " "), "snapshots/s1/manifest snapshots/s10/manifest snapshots/s2/manifest"; got != want {
			t.Fatalf("List(snapshots/) = %s, want %s", got, want)
		}
		if got, want := strings.Join(list("snapshots/s1"), " "), "snapshots/s1/manifest snapshots/s10/manifest"; got != want {
			t.Fatalf("List(snapshots/s1) = %s, want %s", got, want)
		}
		if got := len(list("")); got != 4 {
			t.Fatalf("List(\"\") has %d entries, want 4", got)
		}
		if got := list("nothing/"); len(got) != 0 {
			t.Fatalf("List(nothing/) = %v", got)
		}
		if err := s.Delete(ctx, "snapshots/s1/manifest"); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.Exists(ctx, "snapshots/s1/manifest"); ok || err != nil {
			t.Fatalf("Exists after Delete = %v, %v", ok, err)
		}
		if err := s.Delete(ctx, "snapshots/s1/manifest"); err != nil {
			t.Fatalf("Delete of a missing key = %v, want nil", err)
		}
		if got := len(list("snapshots/")); got != 2 {
			t.Fatalf("List after Delete has %d entries, want 2", got)
		}
		if _, err := s.Stat(ctx, "snapshots/s1/manifest"); !errors.Is(err, artifacts.ErrNotFound) {
			t.Fatalf("Stat of a deleted key = %v, want ErrNotFound", err)
		}
		if _, err := s.GetRef(ctx, "snapshots/s1/manifest", artifacts.DigestOf([]byte("s1"))); !errors.Is(err, artifacts.ErrNotFound) {
			t.Fatalf("GetRef of a deleted key = %v, want ErrNotFound", err)
		}
		if _, err := s.Get(ctx, artifacts.BlobKey(artifacts.DigestOf([]byte("never stored")))); !errors.Is(err, artifacts.ErrNotFound) {
			t.Fatalf("Get of a missing blob = %v, want ErrNotFound", err)
		}
		// A key that is not content-addressed may be overwritten; GetRef
		// fetches the version whose digest it is given, and refuses
		// another. Get refuses such a key (its digest would be the
		// store's word).
		put("templates/abc", "tmpl v2")
		p, err := s.GetRef(ctx, "templates/abc", artifacts.DigestOf([]byte("tmpl v2")))
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(p); string(b) != "tmpl v2" {
			t.Fatalf("GetRef after an overwrite = %q", b)
		}
		if _, err := s.GetRef(ctx, "templates/abc", artifacts.DigestOf([]byte("tmpl v1"))); !errors.Is(err, artifacts.ErrDigestMismatch) {
			t.Fatalf("GetRef of an overwritten key with the old digest = %v, want ErrDigestMismatch", err)
		}
		if _, err := s.Get(ctx, "templates/abc"); !errors.Is(err, artifacts.ErrInvalidKey) {
			t.Fatalf("Get of a ref key = %v, want ErrInvalidKey", err)
		}
		for _, bad := range []string{"", "/abs", "a//b", "../x", "a/../b", ".hidden", "a/.b", "sp ace", "a/"} {
			if _, err := s.Exists(ctx, bad); !errors.Is(err, artifacts.ErrInvalidKey) {
				t.Errorf("Exists(%q) = %v, want ErrInvalidKey", bad, err)
			}
		}
	})
}

func TestUnreachable(t *testing.T) {
	t.Run("local", func(t *testing.T) { testUnreachable(t, newLocalEnv(t)) })
	t.Run("s3", func(t *testing.T) {
		// Its own server: this test stops it.
		srv := s3test.StartT(t)
		testUnreachable(t, newS3Env(t, srv))
	})
}

func testUnreachable(t *testing.T, e *env) {
	ctx := context.Background()
	s := newStore(t, e.backend)
	dir := t.TempDir()
	cachedData, otherData := randBytes(t, 64<<10), randBytes(t, 64<<10)
	writeFile(t, filepath.Join(dir, "cached"), cachedData, 0o600)
	writeFile(t, filepath.Join(dir, "other"), otherData, 0o600)
	cached, err := s.PutFile(ctx, filepath.Join(dir, "cached"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.PutFile(ctx, filepath.Join(dir, "other"))
	if err != nil {
		t.Fatal(err)
	}
	cachedPath, err := s.Get(ctx, cached.Key)
	if err != nil {
		t.Fatal(err)
	}

	e.cut(t)
	start := time.Now()
	check := func(op string, err error) {
		t.Helper()
		var ue *artifacts.UnavailableError
		if !errors.Is(err, artifacts.ErrUnavailable) || !errors.As(err, &ue) {
			t.Fatalf("%s on an unreachable store = %v, want an *UnavailableError", op, err)
		}
	}
	big := randBytes(t, 11<<20)
	_, err = s.Put(ctx, "refs/while-down", bytes.NewReader(big), -1, artifacts.DigestOf(big))
	check("Put", err)
	_, err = s.PutFile(ctx, filepath.Join(dir, "other"))
	check("PutFile", err)
	_, err = s.Exists(ctx, other.Key)
	check("Exists", err)
	_, err = s.List(ctx, "blobs/")
	check("List", err)
	check("Delete", s.Delete(ctx, other.Key))
	_, err = s.Get(ctx, other.Key)
	check("Get", err)
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("failing on an unreachable store took %v", d)
	}
	// The cache is intact: what it held is served without the backend,
	// what failed left nothing.
	p, err := s.Get(ctx, cached.Key)
	if err != nil || p != cachedPath {
		t.Fatalf("Get of a cached blob while the store is down = %q, %v", p, err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, cachedData) {
		t.Fatal("the cached copy changed")
	}
	assertCacheClean(t, s, []string{cached.Digest.Hex()})

	e.heal(t)
	p, err = s.Get(ctx, other.Key)
	if err != nil {
		t.Fatalf("Get after the store came back: %v", err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, otherData) {
		t.Fatal("Get after the store came back returned other bytes")
	}
	if ok, err := s.Exists(ctx, "refs/while-down"); ok || err != nil {
		t.Fatalf("the Put made while the store was down: Exists = %v, %v", ok, err)
	}
}

// assertCacheClean checks the cache holds exactly the files want (by hex)
// and no partial entries.
func assertCacheClean(t *testing.T, s *artifacts.Store, want []string) {
	t.Helper()
	var got []string
	filepath.WalkDir(s.CacheDir(), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.CacheDir(), p)
		if strings.HasPrefix(d.Name(), ".tmp-") {
			t.Errorf("partial cache entry left: %s", rel)
		}
		if filepath.Dir(rel) == "sha256" && !d.IsDir() {
			got = append(got, d.Name())
		}
		return nil
	})
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("cache holds %v, want %v", got, want)
	}
}

// canXattr reports whether p's filesystem takes user xattrs.
func canXattr(p string) bool {
	err := unix.Setxattr(p, "user.airlock.probe", []byte("1"), 0)
	if err == nil {
		unix.Removexattr(p, "user.airlock.probe")
	}
	return err == nil
}

// gatedBackend holds every download until release is closed.
type gatedBackend struct {
	artifacts.Backend
	opens   atomic.Int32
	release chan struct{}
}

type gatedReader struct {
	io.ReadCloser
	release chan struct{}
}

func (g gatedReader) Read(p []byte) (int, error) {
	<-g.release
	return g.ReadCloser.Read(p)
}

func (g *gatedBackend) Open(ctx context.Context, key string) (io.ReadCloser, artifacts.Info, error) {
	g.opens.Add(1)
	rc, info, err := g.Backend.Open(ctx, key)
	if err != nil {
		return nil, info, err
	}
	return gatedReader{rc, g.release}, info, nil
}

// A caller that gives up does not fail the others waiting for the same
// download, and the download is made once.
func TestGetCallerGivingUpLeavesOthers(t *testing.T) {
	e := newLocalEnv(t)
	gb := &gatedBackend{Backend: e.backend, release: make(chan struct{})}
	s := newStore(t, gb)
	ctx := context.Background()
	data := randBytes(t, 1<<20)
	info, err := s.Put(ctx, "refs/gated", bytes.NewReader(data), int64(len(data)), artifacts.DigestOf(data))
	if err != nil {
		t.Fatal(err)
	}
	stayer := make(chan error, 1)
	go func() {
		p, err := s.GetRef(ctx, info.Key, info.Digest)
		if err == nil {
			if b, _ := os.ReadFile(p); !bytes.Equal(b, data) {
				err = errors.New("wrong bytes")
			}
		}
		stayer <- err
	}()
	for gb.opens.Load() == 0 { // the download started, for the caller that stays
		time.Sleep(time.Millisecond)
	}
	quitter, quit := context.WithCancel(ctx)
	quit()
	if _, err := s.GetRef(quitter, info.Key, info.Digest); !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up got %v, want context.Canceled", err)
	}
	close(gb.release)
	if err := <-stayer; err != nil {
		t.Fatalf("the caller that stayed: %v", err)
	}
	if n := gb.opens.Load(); n != 1 {
		t.Fatalf("%d downloads, want 1", n)
	}
	assertCacheClean(t, s, []string{info.Digest.Hex()})
}
