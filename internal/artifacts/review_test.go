package artifacts_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/artifacts"
	"github.com/airlock-sandbox/airlock/internal/artifacts/s3test"
	"github.com/airlock-sandbox/airlock/internal/store/sqlite"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// marker is the name of the file an attacker's tree holds: found anywhere
// on the fetching node, it was unpacked.
const marker = "EVIL-MARKER"

// reviewEnv is a bucket prefix on the real S3 server (versitygw) with two
// nodes' stores over it, and a client that writes the bucket directly, as
// anyone holding the S3 write credential can.
type reviewEnv struct {
	srv    *s3test.Server
	prefix string
	client *minio.Client
	a, b   *artifacts.Store // node A writes, node B fetches
	probe  *probeBackend    // B's backend
}

func newReviewEnv(t *testing.T) *reviewEnv {
	t.Helper()
	srv := s3test.Shared(t)
	prefix := "review/" + strings.NewReplacer("/", "-").Replace(t.Name())
	backend := func() artifacts.Backend {
		b, err := artifacts.NewS3(artifacts.S3Config{
			Endpoint: "http://" + srv.Endpoint, Bucket: srv.Bucket, Prefix: prefix, Region: srv.Region,
			AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PartSize: 5 << 20, MaxRetries: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	e := &reviewEnv{srv: srv, prefix: prefix, client: client}
	e.a = newReviewStore(t, backend())
	e.probe = &probeBackend{Backend: backend()}
	e.b = newReviewStore(t, e.probe)
	e.probe.watch = e.b.CacheDir()
	return e
}

func newReviewStore(t *testing.T, b artifacts.Backend) *artifacts.Store {
	t.Helper()
	st, err := artifacts.NewStore(b, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// forge writes data under key (relative to the prefix) with an
// x-amz-meta-sha256 of the attacker's choosing.
func (e *reviewEnv) forge(t *testing.T, key string, data []byte, claimed artifacts.Digest) {
	t.Helper()
	_, err := e.client.PutObject(context.Background(), e.srv.Bucket, e.prefix+"/"+key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{UserMetadata: map[string]string{"Sha256": claimed.Hex()}})
	if err != nil {
		t.Fatal(err)
	}
}

// evilTree stores (through A's store, as any writer can) a tree holding
// the marker and returns its digest and packed bytes.
func (e *reviewEnv) evilTree(t *testing.T) (artifacts.Digest, []byte) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, marker), []byte("attacker's bytes\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	info, err := e.a.PutDir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.a.Get(context.Background(), info.Key) // the packed bytes
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return info.Digest, b
}

// probeBackend records whether anything named marker existed under watch
// (the fetching node's cache) while an object was being read from the
// store: the unpacker saw bytes that were not verified yet.
type probeBackend struct {
	artifacts.Backend
	watch string
	saw   atomic.Bool
}

func (p *probeBackend) Open(ctx context.Context, key string) (io.ReadCloser, artifacts.Info, error) {
	rc, info, err := p.Backend.Open(ctx, key)
	if err != nil {
		return rc, info, err
	}
	return &probeReader{ReadCloser: rc, p: p}, info, nil
}

type probeReader struct {
	io.ReadCloser
	p *probeBackend
}

func (r *probeReader) Read(b []byte) (int, error) {
	if len(b) > 4096 {
		b = b[:4096] // small reads: the unpacker gets ahead of the end
	}
	n, err := r.ReadCloser.Read(b)
	if err == io.EOF {
		// Let a streaming unpacker catch up with the last bytes read.
		time.Sleep(50 * time.Millisecond)
	}
	if found(r.p.watch) {
		r.p.saw.Store(true)
	}
	return n, err
}

// found reports whether a file named marker is under dir.
func found(dir string) bool {
	hit := false
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == marker {
			hit = true
			return filepath.SkipAll
		}
		return nil
	})
	return hit
}

// nothingFetched fails unless dst does not exist, B's cache holds no tree
// and no partial download, and the marker was never unpacked on B.
func (e *reviewEnv) nothingFetched(t *testing.T, dst string) {
	t.Helper()
	if _, err := os.Lstat(dst); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the destination %s exists after a refused fetch (%v)", dst, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.b.CacheDir(), "trees")); len(ents) != 0 {
		t.Errorf("%d trees in the fetching node's cache after a refused fetch", len(ents))
	}
	ents, _ := os.ReadDir(e.b.CacheDir())
	for _, en := range ents {
		if strings.HasPrefix(en.Name(), ".tmp-") {
			t.Errorf("left over in the fetching node's cache: %s", en.Name())
		}
	}
	if e.probe.saw.Load() || found(e.b.CacheDir()) || found(filepath.Dir(dst)) {
		t.Errorf("the attacker's tree was unpacked on the fetching node before (or without) its digest was checked")
	}
}

// imageDir is a small sandbox image: a "memory state" and a layer file.
func imageDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string]string{"checkpoint/state": "the sandbox's memory\n", "image.json": `{"runtime":"gvisor"}`} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// imageManifestJSON is what an attacker writes under an image key: a
// manifest naming their tree.
func imageManifestJSON(tree artifacts.Digest, size int) []byte {
	b, _ := json.Marshal(map[string]any{"version": 1, "tree": tree, "packedBytes": size})
	return b
}

// TestReviewArtifacts: the attacks of the security review's M4 (issue 23)
// on the artifact store, against the real S3 server. Whoever can write the
// bucket rewrites an image's or a template's manifest (with a matching
// x-amz-meta-sha256) or a tree object itself; the fetching node refuses it
// on the digest its database row recorded, before anything is unpacked.
func TestReviewArtifacts(t *testing.T) {
	ctx := context.Background()

	for _, kind := range []struct{ name, key string }{
		{"paused", "paused/sb1/0123456789ab"},
		{"snapshot", "snapshots/snap1"},
	} {
		t.Run("attack/M4-"+kind.name+"-manifest-rewritten", func(t *testing.T) {
			e := newReviewEnv(t)
			digest, err := artifacts.Images{St: e.a}.Put(ctx, kind.key, imageDir(t))
			if err != nil {
				t.Fatal(err)
			}
			evil, packed := e.evilTree(t)
			forged := imageManifestJSON(evil, len(packed))
			e.forge(t, kind.key, forged, artifacts.DigestOf(forged)) // metadata matches the new bytes
			dst := filepath.Join(t.TempDir(), "image")
			imgs := artifacts.Images{St: e.b}
			get := imgs.Get
			if kind.name == "snapshot" {
				get = imgs.GetShared
			}
			err = get(ctx, kind.key, digest, dst)
			if !errors.Is(err, artifacts.ErrDigestMismatch) || !strings.Contains(err.Error(), kind.key) {
				t.Fatalf("fetching a rewritten %s image = %v, want a digest mismatch naming %s", kind.name, err, kind.key)
			}
			e.nothingFetched(t, dst)
			// Without the recorded digest nothing is fetched at all.
			if err := get(ctx, kind.key, "", dst); err == nil {
				t.Fatal("an image was fetched without a recorded digest")
			}
			e.nothingFetched(t, dst)
		})
	}

	t.Run("attack/M4-tree-rewritten-with-forged-metadata", func(t *testing.T) {
		// The tree object itself, under its content-addressed key, holds
		// the attacker's tree and claims the key's digest: it is refused
		// before the unpacker reads a byte of it.
		e := newReviewEnv(t)
		key := "paused/sb2/0123456789ab"
		digest, err := artifacts.Images{St: e.a}.Put(ctx, key, imageDir(t))
		if err != nil {
			t.Fatal(err)
		}
		objs, err := e.a.List(ctx, "trees/")
		if err != nil || len(objs) != 1 {
			t.Fatalf("trees after Put: %v, %v", objs, err)
		}
		_, packed := e.evilTree(t)
		e.forge(t, objs[0].Key, packed, objs[0].Digest)
		dst := filepath.Join(t.TempDir(), "image")
		err = artifacts.Images{St: e.b}.Get(ctx, key, digest, dst)
		if !errors.Is(err, artifacts.ErrDigestMismatch) {
			t.Fatalf("fetching an image whose tree was rewritten = %v, want a digest mismatch", err)
		}
		e.nothingFetched(t, dst)
	})

	t.Run("attack/M4-template-manifest-rewritten", func(t *testing.T) {
		e := newReviewEnv(t)
		db, err := sqlite.Open(filepath.Join(t.TempDir(), "airlock.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		// Node A records a template (a Dockerfile build's last layer).
		ma := template.NewManager(t.TempDir(), db, nil)
		ma.SetShared(true)
		ma.SetArtifacts(e.a)
		hash := strings.Repeat("c", 64)
		tmp, err := os.MkdirTemp(ma.Dir(), ".tmp-")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(tmp, "rootfs", "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, "rootfs", "etc", "os-release"), []byte("ID=debian\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := ma.PublishLayer(tmp, hash, 10, `{"kind":"layer"}`); err != nil {
			t.Fatal(err)
		}
		if _, err := ma.Register(ctx, "app", hash, `{"kind":"dockerfile"}`); err != nil {
			t.Fatal(err)
		}
		rec, err := db.GetTemplate(ctx, "app")
		if err != nil || rec.ArtifactDigest == "" {
			t.Fatalf("template row after Register: %+v, %v (want an artifact digest)", rec, err)
		}
		// The attacker rewrites templates/<hash> to name their root
		// filesystem, with matching metadata.
		evil, packed := e.evilTree(t)
		forged, _ := json.Marshal(map[string]any{"version": 1, "hash": hash, "rootfs": evil, "packedBytes": len(packed),
			"meta": map[string]any{"name": "layer", "hash": hash, "sizeBytes": 10}})
		e.forge(t, template.ManifestKey(hash), forged, artifacts.DigestOf(forged))
		// Node B pulls on first use: refused.
		dirB := t.TempDir()
		mb := template.NewManager(dirB, db, nil)
		mb.SetShared(true)
		mb.SetArtifacts(e.b)
		_, err = mb.Get(ctx, "app")
		if !errors.Is(err, artifacts.ErrDigestMismatch) || !strings.Contains(err.Error(), "app") {
			t.Fatalf("Get of a template whose manifest was rewritten = %v, want a digest mismatch naming it", err)
		}
		if _, ok := mb.LayerPath(hash); ok {
			t.Fatal("the rewritten template was installed")
		}
		e.nothingFetched(t, filepath.Join(dirB, "templates", hash))
		// The builder's next push puts its manifest back, and B pulls it.
		ma.PushMissing(ctx)
		got, err := mb.Get(ctx, "app")
		if err != nil {
			t.Fatalf("Get after the builder pushed again: %v", err)
		}
		if b, err := os.ReadFile(filepath.Join(got.RootFS, "etc", "os-release")); err != nil || string(b) != "ID=debian\n" {
			t.Fatalf("pulled template: etc/os-release %q, %v", b, err)
		}
	})

	t.Run("attack/M4-unpack-device-and-trusted-xattr", func(t *testing.T) {
		// A tree written by whoever can write the bucket, under its right
		// content-addressed key: it passes the digest check, and Unpack
		// (as root) still refuses what no sandbox image needs.
		e := newReviewEnv(t)
		packed := craftTree(t)
		info, err := e.a.Put(ctx, artifacts.TreeKey(artifacts.DigestOf(packed)), bytes.NewReader(packed), int64(len(packed)), artifacts.DigestOf(packed))
		if err != nil {
			t.Fatal(err)
		}
		dir, err := e.b.GetDir(ctx, info.Key)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"dev/mem", "dev/sda"} {
			if _, err := os.Lstat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s was made (%v): device nodes other than whiteouts must be dropped", name, err)
			}
		}
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, "upper/gone"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
			t.Errorf("the overlay whiteout upper/gone: mode %o rdev %d, %v (want a 0/0 character device)", st.Mode, st.Rdev, err)
		}
		bin := filepath.Join(dir, "bin/ping")
		for name, want := range map[string]bool{"trusted.x": false, "security.selinux": false, "security.capability": true, "user.note": true} {
			_, err := unix.Lgetxattr(bin, name, make([]byte, 256))
			if got := err == nil; got != want {
				t.Errorf("xattr %s on bin/ping: present %v (%v), want %v", name, got, err, want)
			}
		}
		if _, err := unix.Lgetxattr(filepath.Join(dir, "upper"), "trusted.overlay.opaque", make([]byte, 8)); err != nil {
			t.Errorf("trusted.overlay.opaque on upper/: %v (kept: an opaque directory of a saved layer)", err)
		}
		if _, err := unix.Lgetxattr(filepath.Join(dir, "upper"), "trusted.overlay.redirect", make([]byte, 64)); err == nil {
			t.Error("trusted.overlay.redirect on upper/ was kept")
		}
	})

	t.Run("attack/M4-agent-path-dotdot", func(t *testing.T) {
		// An image or row naming its agent build "<x>/.." (filepath.Base
		// is "..") or any path that is not <64 hex>/airlock-envd.
		agents := "/var/lib/airlock/agents"
		h := strings.Repeat("a", 64)
		for _, bad := range []string{"x/..", "/x/../..", "../../etc/" + agentbin.FileName, "/agents/" + h + "/../" + agentbin.FileName,
			"/agents/../" + agentbin.FileName, "/agents/" + strings.Repeat("A", 64) + "/" + agentbin.FileName, "/agents/" + h + "/sh", ""} {
			if p, ok := agentbin.InDir(agents, bad); ok {
				t.Errorf("InDir(%q) = %q, accepted", bad, p)
			}
		}
		if p, ok := agentbin.InDir(agents, "/other/node/agents/"+h+"/"+agentbin.FileName); !ok || p != agents+"/"+h+"/"+agentbin.FileName {
			t.Errorf("InDir of a valid path = %q, %v", p, ok)
		}
	})
}

// craftTree is a tree+zstd stream as an attacker writes it: a character
// device 1:1 (/dev/mem), a block device, an overlay whiteout, and a file
// with trusted.*, security.* and user.* attributes.
func craftTree(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	mt := time.Unix(1700000000, 0)
	add := func(h *tar.Header, data string) {
		h.ModTime, h.Format = mt, tar.FormatPAX
		h.Size = int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	add(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755}, "")
	add(&tar.Header{Name: "dev/", Typeflag: tar.TypeDir, Mode: 0o755}, "")
	add(&tar.Header{Name: "dev/mem", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 1}, "")
	add(&tar.Header{Name: "dev/sda", Typeflag: tar.TypeBlock, Mode: 0o666, Devmajor: 8, Devminor: 0}, "")
	add(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}, "")
	add(&tar.Header{Name: "bin/ping", Typeflag: tar.TypeReg, Mode: 0o755, PAXRecords: map[string]string{
		"SCHILY.xattr.trusted.x":           "attacker",
		"SCHILY.xattr.security.selinux":    "system_u:object_r:unlabeled_t:s0",
		"SCHILY.xattr.security.capability": "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
		"SCHILY.xattr.user.note":           "kept",
	}}, "#!/bin/sh\n")
	add(&tar.Header{Name: "upper/", Typeflag: tar.TypeDir, Mode: 0o755, PAXRecords: map[string]string{
		"SCHILY.xattr.trusted.overlay.opaque":   "y",
		"SCHILY.xattr.trusted.overlay.redirect": "/etc",
	}}, "")
	add(&tar.Header{Name: "upper/gone", Typeflag: tar.TypeChar, Mode: 0o600}, "")
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
