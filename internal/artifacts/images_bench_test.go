package artifacts_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
	"github.com/airlock-sandbox/airlock/internal/artifacts/s3test"
)

// BenchmarkImageGetS3 (issue 24): Images.Get of a paused image whose
// checkpoint/pages.img is 120 MiB (a blob of its own) from a versitygw S3
// server on loopback, as a node fetches it on a resume elsewhere.
//
//	go test -run '^$' -bench ImageGetS3 -benchtime 10x ./internal/artifacts/
func BenchmarkImageGetS3(b *testing.B) {
	srv := s3test.StartT(b)
	st, err := artifacts.NewS3(artifacts.S3Config{
		Endpoint: "http://" + srv.Endpoint, Bucket: srv.Bucket, Prefix: "bench", Region: srv.Region,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, MaxRetries: 1,
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	src := b.TempDir()
	if err := os.Mkdir(filepath.Join(src, "checkpoint"), 0o700); err != nil {
		b.Fatal(err)
	}
	pages := make([]byte, 120<<20)
	r := rand.NewChaCha8([32]byte{1})
	_, _ = r.Read(pages)
	if err := os.WriteFile(filepath.Join(src, "checkpoint", "pages.img"), pages, 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "image.json"), []byte("{}"), 0o600); err != nil {
		b.Fatal(err)
	}
	cache := b.TempDir()
	s, err := artifacts.NewStore(st, filepath.Join(cache, "cache"), nil)
	if err != nil {
		b.Fatal(err)
	}
	img := artifacts.Images{St: s}
	digest, err := img.Put(ctx, "paused/bench/n1", src)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(pages)))
	b.ResetTimer()
	for i := range b.N {
		dst := filepath.Join(cache, "dst", string(rune('a'+i%26))+string(rune('a'+i/26%26)))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			b.Fatal(err)
		}
		if err := img.Get(ctx, "paused/bench/n1", digest, dst); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(dst)
		b.StartTimer()
	}
}
