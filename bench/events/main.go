// Command events measures what recording lifecycle events costs the
// sandbox row writes (internal/events, the store's event hook) on the
// single host's SQLite store: the latency of a create's row (PutSandbox of
// a new row), a timeout change (PutSandbox of a changed row) and a kill's
// row (DeleteSandbox), without a hook (the baseline), with the hook and no
// webhook, and with the hook and one subscribed webhook (a pending
// delivery per event). The three run interleaved, round by round, in one
// process, on one database file each.
//
//	go run ./bench/events [-n 2000]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/sqlite"
)

type variant struct {
	name             string
	db               *sqlite.DB
	create, upd, del []time.Duration
}

func main() {
	n := flag.Int("n", 2000, "sandboxes per variant")
	flag.Parse()
	dir, err := os.MkdirTemp("", "events-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	var vs []*variant
	for _, name := range []string{"no hook (baseline)", "hook, no webhook", "hook, 1 webhook"} {
		db, err := sqlite.Open(filepath.Join(dir, fmt.Sprintf("v%d.db", len(vs))))
		if err != nil {
			log.Fatal(err)
		}
		defer db.Close()
		if len(vs) > 0 {
			rec := &events.Recorder{TeamID: events.NewID()}
			db.SetEventHook(rec.Hook)
		}
		if len(vs) == 2 {
			if err := db.CreateWebhook(ctx, &store.Webhook{ID: "w", URL: "https://example.com", Events: events.Types, Enabled: true, Secret: "s"}); err != nil {
				log.Fatal(err)
			}
		}
		vs = append(vs, &variant{name: name, db: db})
	}
	timed := func(dst *[]time.Duration, f func() error) {
		t0 := time.Now()
		if err := f(); err != nil {
			log.Fatal(err)
		}
		*dst = append(*dst, time.Since(t0))
	}
	for i := range *n {
		for _, v := range vs {
			s := &store.Sandbox{ID: fmt.Sprintf("sb%06d", i), TemplateID: "base", State: "running", CPUCount: 2, MemoryMB: 512,
				StartedAt: time.Now(), EndAt: time.Now().Add(5 * time.Minute), Metadata: map[string]string{"k": "v"}}
			timed(&v.create, func() error { return v.db.PutSandbox(ctx, s) })
			s.EndAt = s.EndAt.Add(time.Minute)
			timed(&v.upd, func() error { return v.db.PutSandbox(ctx, s) })
			timed(&v.del, func() error { return v.db.DeleteSandbox(ctx, s.ID) })
		}
	}
	pct := func(ds []time.Duration, p float64) string {
		s := slices.Clone(ds)
		slices.Sort(s)
		return fmt.Sprintf("%.0f µs", float64(s[int(float64(len(s)-1)*p)].Microseconds()))
	}
	fmt.Printf("| variant (n=%d each) | create row p50 / p99 | timeout row p50 / p99 | kill row p50 / p99 |\n|---|---|---|---|\n", *n)
	for _, v := range vs {
		fmt.Printf("| %s | %s / %s | %s / %s | %s / %s |\n", v.name, pct(v.create, .5), pct(v.create, .99),
			pct(v.upd, .5), pct(v.upd, .99), pct(v.del, .5), pct(v.del, .99))
	}
}
