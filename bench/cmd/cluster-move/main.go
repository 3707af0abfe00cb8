// Command cluster-move measures moving paused sandboxes between the nodes of
// an Airlock cluster with an artifact store: in one run, on the same
// sandboxes, a pause (which uploads the image), a resume on the node that
// paused it (the baseline) and a resume on another node (the sandbox's node
// drained without moving, so the api tier moves it: adopt, fetch, restore),
// then a drain that moves several running sandboxes. It prints p50/p99 and
// the ratio to the baseline, and checks after every resume that the
// sandbox's file and background process are there.
//
//	source STATE/env   # scripts/run-cluster.sh up … --artifacts …
//	go run ./bench/cmd/cluster-move -n 10 -mem-mb 64
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/bench/internal/stats"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

func main() {
	api := flag.String("api", os.Getenv("E2B_API_URL"), "api tier URL (an api instance or the balancer)")
	key := flag.String("api-key", os.Getenv("E2B_API_KEY"), "API key")
	tpl := flag.String("template", "base", "template")
	n := flag.Int("n", 10, "sandboxes paused and resumed each way")
	memMB := flag.Int("mem-mb", 64, "MiB each sandbox keeps in memory (a file in /dev/shm), so the image has a realistic size")
	drainN := flag.Int("drain", 4, "running sandboxes on the node the drain moves")
	flag.Parse()
	if *api == "" || *key == "" {
		fmt.Fprintln(os.Stderr, "cluster-move: -api and -api-key are required (or E2B_API_URL, E2B_API_KEY)")
		os.Exit(2)
	}
	b := &bench{c: airlock.New(*api, *key), api: strings.TrimRight(*api, "/"), key: *key, tpl: *tpl, memMB: *memMB}
	if err := b.run(context.Background(), os.Stdout, *n, *drainN); err != nil {
		fmt.Fprintln(os.Stderr, "cluster-move:", err)
		os.Exit(1)
	}
}

type bench struct {
	c     *airlock.Client
	api   string
	key   string
	tpl   string
	memMB int
}

// call sends an API request and returns the status, the node that served
// it (X-Airlock-Node) and the body.
func (b *bench) call(ctx context.Context, method, path string, body any) (int, string, []byte, error) {
	var r io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.api+path, r)
	if err != nil {
		return 0, "", nil, err
	}
	req.Header.Set("X-API-Key", b.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Airlock-Node"), data, nil
}

func (b *bench) must(ctx context.Context, want int, method, path string, body any) (string, []byte, error) {
	st, node, data, err := b.call(ctx, method, path, body)
	if err == nil && st != want {
		err = fmt.Errorf("%s %s: %d %s", method, path, st, bytes.TrimSpace(data))
	}
	return node, data, err
}

// sandbox is one sandbox of the run: where it is, and what must survive.
type sandbox struct {
	sb   *airlock.Sandbox
	node string
}

func (b *bench) create(ctx context.Context) (*sandbox, error) {
	sb, err := b.c.CreateSandbox(ctx, airlock.SandboxOptions{Template: b.tpl, Timeout: 20 * time.Minute})
	if err != nil {
		return nil, err
	}
	s := &sandbox{sb: sb}
	script := fmt.Sprintf("head -c %dM /dev/urandom > /dev/shm/mem && echo kept > /home/user/kept.txt && (sleep 100000 >/dev/null 2>&1 & echo $! > /home/user/pid)", b.memMB)
	if code, err := b.c.RunShell(ctx, sb.ID, sb.AccessToken, script); err != nil || code != 0 {
		return nil, fmt.Errorf("preparing %s: exit %d, %v", sb.ID, code, err)
	}
	if s.node, err = b.nodeOf(ctx, sb.ID); err != nil {
		return nil, err
	}
	return s, nil
}

func (b *bench) nodeOf(ctx context.Context, id string) (string, error) {
	node, _, err := b.must(ctx, http.StatusOK, http.MethodGet, "/sandboxes/"+id, nil)
	return node, err
}

// check runs a command that needs the file and the process of before.
func (b *bench) check(ctx context.Context, s *sandbox) error {
	code, err := b.c.RunShell(ctx, s.sb.ID, s.sb.AccessToken,
		"test \"$(cat /home/user/kept.txt)\" = kept && kill -0 \"$(cat /home/user/pid)\" && test -s /dev/shm/mem")
	if err != nil || code != 0 {
		return fmt.Errorf("sandbox %s lost its file, process or memory: exit %d, %v", s.sb.ID, code, err)
	}
	return nil
}

func (b *bench) timed(f func() error) (time.Duration, error) {
	start := time.Now()
	err := f()
	return time.Since(start), err
}

func (b *bench) run(ctx context.Context, out io.Writer, n, drainN int) (err error) {
	var all []*sandbox
	defer func() {
		for _, s := range all {
			_ = b.c.KillSandbox(context.WithoutCancel(ctx), s.sb.ID)
		}
	}()
	samples := map[string][]time.Duration{}
	moves := 0
	for i := range n {
		s, err := b.create(ctx)
		if err != nil {
			return err
		}
		all = append(all, s)
		pause := func() error {
			_, _, err := b.must(ctx, http.StatusNoContent, http.MethodPost, "/sandboxes/"+s.sb.ID+"/pause", nil)
			return err
		}
		resume := func() error {
			_, _, err := b.must(ctx, http.StatusCreated, http.MethodPost, "/sandboxes/"+s.sb.ID+"/resume", map[string]int{"timeout": 1200})
			return err
		}
		// Baseline: pause, resume where it is.
		d, err := b.timed(pause)
		if err != nil {
			return err
		}
		samples["pause (uploads the image)"] = append(samples["pause (uploads the image)"], d)
		if d, err = b.timed(resume); err != nil {
			return err
		}
		samples["resume on its node"] = append(samples["resume on its node"], d)
		if err := b.check(ctx, s); err != nil {
			return err
		}
		// Moved: pause, its node drained (placement only), resume.
		if _, err := b.timed(pause); err != nil {
			return err
		}
		if _, _, err := b.must(ctx, http.StatusOK, http.MethodPost, "/airlock/v1/nodes/"+s.node+"/drain?move=false", nil); err != nil {
			return err
		}
		d, err = b.timed(resume)
		_, _, uerr := b.must(ctx, http.StatusOK, http.MethodPost, "/airlock/v1/nodes/"+s.node+"/undrain", nil)
		if err != nil {
			return err
		}
		if uerr != nil {
			return uerr
		}
		samples["resume on another node"] = append(samples["resume on another node"], d)
		now, err := b.nodeOf(ctx, s.sb.ID)
		if err != nil {
			return err
		}
		if now != s.node {
			moves++
		}
		if err := b.check(ctx, s); err != nil {
			return err
		}
		s.node = now
		fmt.Fprintf(os.Stderr, "sandbox %d/%d done\n", i+1, n)
	}
	if moves != n {
		return fmt.Errorf("%d of %d resumes landed on another node: is the cluster's api tier given --artifacts?", moves, n)
	}

	// A drain of drainN running sandboxes on one node.
	var drained []*sandbox
	byNode := map[string][]*sandbox{}
	for tries := 0; tries < drainN*6 && len(drained) < drainN; tries++ {
		s, err := b.create(ctx)
		if err != nil {
			return err
		}
		all = append(all, s)
		byNode[s.node] = append(byNode[s.node], s)
		if len(byNode[s.node]) > len(drained) {
			drained = byNode[s.node]
		}
	}
	node := drained[0].node
	var res airlock.NodeDrain
	d, err := b.timed(func() error {
		_, data, err := b.must(ctx, http.StatusOK, http.MethodPost, "/airlock/v1/nodes/"+node+"/drain", nil)
		if err == nil {
			err = json.Unmarshal(data, &res)
		}
		return err
	})
	_, _, uerr := b.must(ctx, http.StatusOK, http.MethodPost, "/airlock/v1/nodes/"+node+"/undrain", nil)
	if err = errors.Join(err, uerr); err != nil {
		return err
	}
	for _, s := range drained {
		if err := b.check(ctx, s); err != nil {
			return err
		}
	}

	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "operation (%s, %d MiB in memory)\tn\tp50\tp99\tp50 vs resume on its node\n", b.tpl, b.memMB)
	base, _ := stats.P50P99(samples["resume on its node"])
	for _, op := range []string{"pause (uploads the image)", "resume on its node", "resume on another node"} {
		p50, p99 := stats.P50P99(samples[op])
		ratio := ""
		if strings.HasPrefix(op, "resume") {
			ratio = fmt.Sprintf("%.2f×", float64(p50)/float64(base))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", op, len(samples[op]), stats.MS(p50), stats.MS(p99), ratio)
	}
	fmt.Fprintf(tw, "drain of %s: %d running sandboxes moved (%d failed)\t1\t%s\t\t%s a sandbox\n",
		node, len(res.Moved), len(res.Failed), stats.MS(d), stats.MS(d/time.Duration(max(len(res.Moved), 1))))
	return tw.Flush()
}
