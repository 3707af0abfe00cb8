// Command kill measures how long a kill takes to answer (issue 24): it
// creates N idle sandboxes, kills them one after another, creates N again
// and kills them P at a time, and prints p50/p99/max of each. With -churn
// a helper adds and deletes dummy links in a network namespace of its own
// the whole time, holding the kernel's rtnl lock as a host creating and
// removing sandbox networks does (the soak's load, without its CPU).
//
//	AIRLOCK_URL=http://127.0.0.1:49990 AIRLOCK_API_KEY=… go run ./bench/kill -n 20 -parallel 10
//
// bench/kill/run.sh runs it against two daemons (an old and a new binary)
// in the same run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

func main() {
	n := flag.Int("n", 20, "idle sandboxes per round (at most 30 on a shared host)")
	parallel := flag.Int("parallel", 10, "kills at a time in the parallel round")
	template := flag.String("template", "base", "template of the sandboxes")
	churn := flag.String("churn", "", "network namespace name: churn rtnl (dummy links) in it during the kills")
	label := flag.String("label", "", "label printed in front of each row")
	flag.Parse()
	url, key := os.Getenv("AIRLOCK_URL"), os.Getenv("AIRLOCK_API_KEY")
	if url == "" || key == "" {
		fmt.Fprintln(os.Stderr, "set AIRLOCK_URL and AIRLOCK_API_KEY")
		os.Exit(2)
	}
	c := airlock.New(url, key)
	ctx := context.Background()
	var stopChurn func()
	if *churn != "" {
		var err error
		if stopChurn, err = startChurn(*churn); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer stopChurn()
	}
	failed := false
	for _, p := range []int{1, *parallel} {
		ids, err := createN(ctx, c, *template, *n)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			killAll(ctx, c, ids)
			failed = true
			break
		}
		lat, errs := killN(ctx, c, ids, p)
		mode := "sequential"
		if p > 1 {
			mode = fmt.Sprintf("%d at a time", p)
		}
		if *churn != "" {
			mode += ", rtnl churn"
		}
		p50, p99, max := pct(lat)
		fmt.Printf("%s\tkill %-26s\tn=%d\tp50 %7.1f ms\tp99 %7.1f ms\tmax %7.1f ms\terrors %d\n",
			*label, mode, len(ids), ms(p50), ms(p99), ms(max), errs)
		failed = failed || errs > 0
	}
	if stopChurn != nil {
		stopChurn()
	}
	if failed {
		os.Exit(1)
	}
}

// createN creates n sandboxes, 4 at a time (a create answers once the
// sandbox's agent answers).
func createN(ctx context.Context, c *airlock.Client, template string, n int) ([]string, error) {
	var mu sync.Mutex
	var ids []string
	var errs []error
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			sb, err := c.CreateSandbox(cctx, airlock.SandboxOptions{Template: template, Timeout: 30 * time.Minute,
				Metadata: map[string]string{"bench": "kill"}})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("creating sandbox: %w", err))
				return
			}
			ids = append(ids, sb.ID)
		}()
	}
	wg.Wait()
	return ids, errors.Join(errs...)
}

// killN kills ids, p at a time, and returns each kill's time.
func killN(ctx context.Context, c *airlock.Client, ids []string, p int) ([]time.Duration, int) {
	var mu sync.Mutex
	var lat []time.Duration
	errs := 0
	sem := make(chan struct{}, p)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			kctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			t0 := time.Now()
			err := c.KillSandbox(kctx, id)
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				errs++
				return
			}
			lat = append(lat, d)
		}()
	}
	wg.Wait()
	return lat, errs
}

func killAll(ctx context.Context, c *airlock.Client, ids []string) {
	for _, id := range ids {
		_ = c.KillSandbox(ctx, id)
	}
}

// startChurn adds and deletes dummy links in network namespace ns (created
// here, removed by the returned stop) in a loop of `ip -batch` runs.
func startChurn(ns string) (func(), error) {
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v %s", ns, err, out)
	}
	var b strings.Builder
	for i := 0; i < 50; i++ {
		fmt.Fprintf(&b, "link add kc%d type dummy\n", i)
	}
	for i := 0; i < 50; i++ {
		fmt.Fprintf(&b, "link del kc%d\n", i)
	}
	script := b.String()
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			default:
			}
			cmd := exec.Command("ip", "-n", ns, "-force", "-batch", "-")
			cmd.Stdin = strings.NewReader(script)
			_ = cmd.Run()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			<-stopped
			_ = exec.Command("ip", "netns", "del", ns).Run()
		})
	}, nil
}

func pct(ds []time.Duration) (p50, p99, max time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return at(0.5), at(0.99), ds[len(ds)-1]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
