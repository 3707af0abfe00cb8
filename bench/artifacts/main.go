// Command artifacts measures the artifact store (internal/artifacts): put
// and get of a directory tree (packed as tar+zstd) and of one large file,
// against the local backend and against S3 — a versitygw on loopback,
// started here (scripts/build-s3-server.sh builds it) — and prints a table
// of MB/s.
//
//	go run ./bench/artifacts                 # a 256 MiB tree and a 256 MiB file, 3 runs each
//	go run ./bench/artifacts -mib 64 -runs 1
//
// The tree is half incompressible (random 4 MiB files) and half text-like
// (64 KiB files of repeated words), about what a root filesystem with
// binaries and docs holds. Every Get starts from an empty cache. The MB/s
// is of the tree's size, not of the bytes on the wire.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
	"github.com/airlock-sandbox/airlock/internal/artifacts/s3test"
)

func main() {
	mib := flag.Int("mib", 256, "size of the tree and of the file, MiB")
	runs := flag.Int("runs", 3, "runs of each operation (the median is shown)")
	flag.Parse()
	if err := run(*mib, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "bench/artifacts:", err)
		os.Exit(1)
	}
}

type result struct {
	backend, op string
	stored      int64
	secs        []float64
}

func run(mib, runs int) error {
	ctx := context.Background()
	work, err := os.MkdirTemp("", "airlock-bench-artifacts-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	tree := filepath.Join(work, "tree")
	if err := makeTree(tree, int64(mib)<<20); err != nil {
		return err
	}
	file := filepath.Join(work, "file")
	if err := makeFile(file, int64(mib)<<20); err != nil {
		return err
	}

	srv, err := s3test.Start(ctx, filepath.Join(work, "s3"))
	if err != nil {
		return err
	}
	defer srv.Stop()
	s3b, err := artifacts.NewS3(artifacts.S3Config{Endpoint: "http://" + srv.Endpoint, Bucket: srv.Bucket, Prefix: "bench",
		Region: srv.Region, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	if err != nil {
		return err
	}
	local, err := artifacts.NewLocal(filepath.Join(work, "local"))
	if err != nil {
		return err
	}

	var results []*result
	for _, b := range []artifacts.Backend{local, s3b} {
		name := "local"
		if b == artifacts.Backend(s3b) {
			name = "s3 (versitygw " + s3test.Version() + ", loopback)"
		}
		res := map[string]*result{}
		for _, op := range []string{"put tree", "get tree", "put file", "get file"} {
			res[op] = &result{backend: name, op: op}
			results = append(results, res[op])
		}
		for i := 0; i < runs; i++ {
			// A fresh cache each run; the keys are deleted at its end, so
			// every put uploads.
			cache := filepath.Join(work, fmt.Sprintf("cache-%s-%d", name[:2], i))
			st, err := artifacts.NewStore(b, cache, slog.New(slog.DiscardHandler))
			if err != nil {
				return err
			}
			var ti, fi artifacts.Info
			if err := timeIt(res["put tree"], func() error { ti, err = st.PutDir(ctx, tree); return err }); err != nil {
				return err
			}
			res["put tree"].stored = ti.Size
			if err := timeIt(res["get tree"], func() error { _, err := st.GetDir(ctx, ti.Key); return err }); err != nil {
				return err
			}
			if err := timeIt(res["put file"], func() error { fi, err = st.PutFile(ctx, file); return err }); err != nil {
				return err
			}
			res["put file"].stored = fi.Size
			if err := timeIt(res["get file"], func() error { _, err := st.Get(ctx, fi.Key); return err }); err != nil {
				return err
			}
			for _, k := range []string{ti.Key, fi.Key} {
				if err := st.Delete(ctx, k); err != nil {
					return err
				}
			}
			if err := os.RemoveAll(cache); err != nil {
				chmodAll(cache)
				os.RemoveAll(cache)
			}
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "backend\top\tMiB\tstored MiB\tmedian s\tMiB/s\tmin–max s\t\n")
	for _, r := range results {
		sort.Float64s(r.secs)
		med := r.secs[len(r.secs)/2]
		stored := "="
		if r.stored > 0 {
			stored = fmt.Sprintf("%.1f", float64(r.stored)/(1<<20))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.2f\t%.0f\t%.2f–%.2f\t\n", r.backend, r.op, mib, stored, med, float64(mib)/med, r.secs[0], r.secs[len(r.secs)-1])
	}
	tw.Flush()
	fmt.Printf("(%d runs; tree: %s; file: random bytes; put includes hashing, and for the tree packing; get includes the hash check, and for the tree unpacking)\n",
		runs, treeDesc)
	return nil
}

func timeIt(r *result, f func() error) error {
	start := time.Now()
	if err := f(); err != nil {
		return fmt.Errorf("%s %s: %w", r.backend, r.op, err)
	}
	r.secs = append(r.secs, time.Since(start).Seconds())
	return nil
}

const treeDesc = "half random 4 MiB files, half 64 KiB text files"

func makeTree(dir string, size int64) error {
	rnd := make([]byte, 4<<20)
	words := []byte(strings.Repeat("sandbox template snapshot layer rootfs airlock artifact cache ", 1100)[:64<<10])
	var n int64
	for i := 0; n < size/2; i++ {
		p := filepath.Join(dir, "bin", fmt.Sprintf("%03d", i%50), fmt.Sprintf("blob-%d", i))
		rand.Read(rnd)
		if err := write(p, rnd); err != nil {
			return err
		}
		n += int64(len(rnd))
	}
	for i := 0; n < size; i++ {
		p := filepath.Join(dir, "share", fmt.Sprintf("%03d", i%100), fmt.Sprintf("doc-%d.txt", i))
		copy(words, fmt.Sprintf("%08d", i)) // no two alike
		if err := write(p, words); err != nil {
			return err
		}
		n += int64(len(words))
	}
	return nil
}

func makeFile(p string, size int64) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 4<<20)
	for n := int64(0); n < size; n += int64(len(buf)) {
		rand.Read(buf)
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
	return f.Close()
}

func write(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}

func chmodAll(dir string) {
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
}
