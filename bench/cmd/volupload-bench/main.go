// Command volupload-bench measures what a content API upload to a
// dir-backed volume (the cluster's, on --volume-root) costs in its space
// check: the per-volume account (issue 27: internal/volume/accounting.go)
// against a walk of the whole volume per upload (what the content API did
// before), in one run, interleaved, on a volume holding -files files.
// Each upload writes -size bytes through volume.Files, as the handler does.
//
//	go run ./bench/cmd/volupload-bench -dir /var/lib/x -files 20000 -uploads 200
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/internal/volume"
)

func main() {
	dir := flag.String("dir", os.TempDir(), "directory to make the volume under (removed after)")
	files := flag.Int("files", 20000, "files already in the volume")
	uploads := flag.Int("uploads", 200, "uploads per way")
	size := flag.Int("size", 4096, "bytes per upload")
	flag.Parse()
	ctx := context.Background()
	root, err := os.MkdirTemp(*dir, "volupload-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	b, err := volume.NewDirBacking(root)
	if err != nil {
		log.Fatal(err)
	}
	const id = "bench"
	if err := b.Create(ctx, id, 64<<30); err != nil {
		log.Fatal(err)
	}
	data, err := b.Dir(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	for i := range *files { // 100 directories of files/100
		d := filepath.Join(data, "d"+strconv.Itoa(i%100))
		if err := os.MkdirAll(d, 0o755); err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "f"+strconv.Itoa(i)), []byte("x"), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	f, err := volume.OpenFiles(data)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	body := make([]byte, *size)
	// walk: what the content API did per upload before (Usage walked).
	walk := func(i int) {
		used, err := volume.DiskUsage(ctx, data)
		if err != nil {
			log.Fatal(err)
		}
		if _, err := f.Write(ctx, fmt.Sprintf("/w%d", i), bytes.NewReader(body), 64<<30-used, volume.Owner{}, false); err != nil {
			log.Fatal(err)
		}
	}
	// account: what it does now.
	account := func(i int) {
		u, err := b.BeginUpload(ctx, id, 0)
		if err != nil {
			log.Fatal(err)
		}
		if err := u.Take(int64(len(body))); err != nil {
			log.Fatal(err)
		}
		_, err = f.Write(ctx, fmt.Sprintf("/a%d", i), bytes.NewReader(body), int64(len(body)), volume.Owner{}, false)
		u.End(err == nil)
		if err != nil {
			log.Fatal(err)
		}
	}
	var tw, ta []time.Duration
	for i := range *uploads { // interleaved: both see the same load
		t0 := time.Now()
		walk(i)
		tw = append(tw, time.Since(t0))
		t0 = time.Now()
		account(i)
		ta = append(ta, time.Since(t0))
	}
	fmt.Printf("volume with %d files, %d uploads of %d bytes each way, interleaved\n", *files, *uploads, *size)
	fmt.Printf("%-28s %10s %10s\n", "space check", "p50", "p99")
	for _, r := range []struct {
		name string
		d    []time.Duration
	}{{"walk per upload (before)", tw}, {"per-volume account (now)", ta}} {
		slices.Sort(r.d)
		fmt.Printf("%-28s %10s %10s\n", r.name, pct(r.d, 50).Round(time.Microsecond), pct(r.d, 99).Round(time.Microsecond))
	}
}

func pct(d []time.Duration, p int) time.Duration {
	return d[min(len(d)-1, len(d)*p/100)]
}
