// Command auditlog-bench measures what keeping the egress audit log on disk
// (internal/jsonlog) adds to the audit path: the NFLOG reader's call
// audit.Book.Add, timed one entry at a time through a burst, with the
// in-memory book (the baseline: no store, as before) and with the book
// backed by a store in a temporary directory. It then measures the writer:
// bursts spread over many sandboxes, timed until everything is on disk.
// No root needed; nothing leaves the temporary directory.
//
// Usage: go run ./bench/cmd/auditlog-bench [-n 100000] [-sandboxes 100] [-runs 3]
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/jsonlog"
)

func main() {
	n := flag.Int("n", 100000, "entries per burst")
	sbs := flag.Int("sandboxes", 100, "sandboxes the writer burst is spread over")
	runs := flag.Int("runs", 3, "runs of each case")
	flag.Parse()
	if err := run(*n, *sbs, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "auditlog-bench:", err)
		os.Exit(1)
	}
}

func entry(i int) audit.Entry {
	return audit.Entry{Time: time.Now(), Kind: audit.KindConn, Decision: audit.Denied, Rule: "denyOut 0.0.0.0/0",
		Protocol: "tcp", Dst: netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), Port: 443}
}

// burst adds n entries for one sandbox and returns each call's duration.
func burst(b *audit.Book, n int) []time.Duration {
	ds := make([]time.Duration, n)
	for i := range n {
		e := entry(i)
		t0 := time.Now()
		b.Add("isandbox", e)
		ds[i] = time.Since(t0)
	}
	return ds
}

func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func report(name string, ds []time.Duration, total time.Duration) {
	fmt.Printf("%-34s p50 %6d ns  p99 %7d ns  p99.9 %8d ns  max %9d ns  burst %5.1f ms (%.2f M entries/s)\n", name,
		pct(ds, 0.50).Nanoseconds(), pct(ds, 0.99).Nanoseconds(), pct(ds, 0.999).Nanoseconds(), slices.Max(ds).Nanoseconds(),
		float64(total.Microseconds())/1000, float64(len(ds))/total.Seconds()/1e6)
}

func run(n, sbs, runs int) error {
	tmp, err := os.MkdirTemp("", "auditlog-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for r := range runs {
		fmt.Printf("run %d: burst of %d entries, one sandbox (the NFLOG reader's view)\n", r+1, n)
		// Baseline: memory only.
		t0 := time.Now()
		ds := burst(audit.NewBook(audit.DefaultSize, nil), n)
		report("  memory only (before)", ds, time.Since(t0))
		// With the store.
		logs, err := jsonlog.Open(filepath.Join(tmp, fmt.Sprint("a", r)), jsonlog.Options{}, nil)
		if err != nil {
			return err
		}
		b := audit.NewBook(audit.DefaultSize, logs)
		t0 = time.Now()
		ds = burst(b, n)
		report("  memory + disk (after)", ds, time.Since(t0))
		_ = b.Last("isandbox", 1) // sync
		_ = logs.Close()

		// Writer throughput: n entries over sbs sandboxes (at most what
		// each keeps), until all are on disk.
		logs, err = jsonlog.Open(filepath.Join(tmp, fmt.Sprint("w", r)), jsonlog.Options{}, nil)
		if err != nil {
			return err
		}
		b = audit.NewBook(audit.DefaultSize, logs)
		per := n / sbs
		t0 = time.Now()
		for i := range per {
			for s := range sbs {
				b.Add(fmt.Sprint("isb", s), entry(i))
			}
		}
		appended := time.Since(t0)
		_ = logs.Close() // writes what is still queued
		written := time.Since(t0)
		var size int64
		des, _ := os.ReadDir(filepath.Join(tmp, fmt.Sprint("w", r)))
		for _, de := range des {
			if fi, err := de.Info(); err == nil {
				size += fi.Size()
			}
		}
		fmt.Printf("  writer: %d entries over %d sandboxes appended in %.1f ms, on disk after %.1f ms: %.0f k entries/s, %.1f MB/s (%d bytes, %d files)\n",
			per*sbs, sbs, float64(appended.Microseconds())/1000, float64(written.Microseconds())/1000,
			float64(per*sbs)/written.Seconds()/1e3, float64(size)/written.Seconds()/1e6, size, len(des))
	}
	return nil
}
