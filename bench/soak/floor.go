package main

// Same-run floors (issue 24): requests and timings that do none of the
// measured operation's own work, taken by the same clients in the same
// rounds, printed as "floor: ..." rows under the operations they bound.
//
//   - floor: get sandbox, floor: health — GET /sandboxes/{id} of the live
//     sandbox and GET /health, through the SDK client (and its transport)
//     that kills: the daemon's round trip under the soak's load, next to kill.
//   - floor: agent round trip — GET /contexts on the sandbox's interpreter
//     port through the SDK (the cell's own path: the daemon's proxy, the
//     sandbox's network stack, the agent), a request that runs no code:
//     the cell's time less the kernel's work, next to cell.
//   - floor: cell in sandbox — the same cell POSTed to the agent's /execute
//     on 127.0.0.1:49999 from a Python client inside the sandbox, timed
//     there: the agent and the kernel, without the daemon, the proxy and the
//     host's network (the agent does not report a cell's duration itself).
//   - floor: create restore, floor: create wait, floor: create restore+wait
//     — the daemon's own step times of the soak's creates (`runsc restore`,
//     and the restored agent's first /health), from its debug log
//     (-daemon-log), matched by sandbox id.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// floorPrefix names the floor rows; they go to Summary.Floors, not Ops.
const floorPrefix = "floor: "

const (
	floorGet         = floorPrefix + "get sandbox"
	floorHealth      = floorPrefix + "health"
	floorAgent       = floorPrefix + "agent round trip"
	floorCell        = floorPrefix + "cell in sandbox"
	floorRestore     = floorPrefix + "create restore"
	floorWait        = floorPrefix + "create wait"
	floorRestoreWait = floorPrefix + "create restore+wait"
)

// floorOrder is the order of the floor rows in the table: the daemon's
// round trip (bounds kill), the cell inside the sandbox (bounds cell), the
// create's runtime steps (bound create).
var floorOrder = []string{floorGet, floorHealth, floorAgent, floorCell, floorRestore, floorWait, floorRestoreWait}

// floorNote is printed under the table.
const floorNote = "floor rows (same run): get sandbox and health bound kill; agent round trip and cell in sandbox bound cell; create restore+wait bounds create"

// Every floorEvery-th SDK cell of a round is followed by the daemon floor
// requests; the in-sandbox cells run once per round, after cell
// floorCellAt, floorCells of them.
const (
	floorEvery  = 10
	floorCellAt = 25
	floorCells  = 10
)

// daemonFloor times GET /sandboxes/{id} and GET /health through sdk.
func daemonFloor(ctx context.Context, c config, sdk *airlock.Client, rec *recorder, id string) {
	_ = rec.do(floorGet, func() error {
		cctx, cancel := context.WithTimeout(ctx, c.opDeadline)
		defer cancel()
		d, err := sdk.GetSandbox(cctx, id)
		if err != nil {
			return err
		}
		if d.SandboxID != id {
			return fmt.Errorf("GET /sandboxes/%s answered sandbox %q", id, d.SandboxID)
		}
		return nil
	})
	_ = rec.do(floorHealth, func() error {
		cctx, cancel := context.WithTimeout(ctx, c.opDeadline)
		defer cancel()
		req, err := http.NewRequestWithContext(cctx, http.MethodGet, strings.TrimRight(sdk.APIURL, "/")+"/health", nil)
		if err != nil {
			return err
		}
		hc := sdk.HTTP
		if hc == nil {
			hc = http.DefaultClient
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /health answered %s", resp.Status)
		}
		return nil
	})
}

// agentFloor times a request to sb's interpreter port that runs no code
// (GET /contexts), through the same SDK path as a cell.
func agentFloor(ctx context.Context, c config, rec *recorder, sb *airlock.Sandbox) {
	_ = rec.do(floorAgent, func() error {
		cctx, cancel := context.WithTimeout(ctx, c.opDeadline)
		defer cancel()
		_, err := sb.ListCodeContexts(cctx)
		return err
	})
}

// inSandboxScript POSTs n cells, the soak's own ("x_<i> = <v>\nprint(x_<i>)"
// with v = base+i), to the agent's /execute with the sandbox's access token over one keep-alive connection
// (TCP_NODELAY; each request is one write), checks each cell's stdout and
// prints each cell's time in microseconds.
// It holds no single quote (it is passed in one).
const inSandboxScript = `import http.client, json, socket, sys, time
n, base, token = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
conn = http.client.HTTPConnection("127.0.0.1", 49999)
conn.connect()
conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
out = []
for i in range(n):
    want = str(base + i)
    body = json.dumps({"code": "x_%d = %s\nprint(x_%d)" % (i, want, i)}).encode()
    t = time.perf_counter()
    conn.request("POST", "/execute", body, {"Content-Type": "application/json", "X-Access-Token": token})
    r = conn.getresponse()
    data = r.read()
    d = time.perf_counter() - t
    if r.status != 200:
        sys.exit("execute answered %d: %s" % (r.status, data[:200]))
    recs = [json.loads(l) for l in data.splitlines() if l.strip()]
    errs = [x for x in recs if x.get("type") == "error"]
    if errs:
        sys.exit("cell error: %s" % errs[0])
    got = "".join(x.get("text", "") for x in recs if x.get("type") == "stdout").strip()
    if got != want or recs[-1].get("type") != "end_of_execution":
        sys.exit("cell printed %r, want %r" % (got, want))
    out.append(str(int(d * 1e6)))
print(" ".join(out))
`

// cellFloor runs floorCells cells through the in-sandbox client and records
// each one's time as a floorCell sample.
func cellFloor(ctx context.Context, c config, proc processStarter, token string, rec *recorder, base int) {
	cctx, cancel := context.WithTimeout(ctx, c.opDeadline)
	defer cancel()
	out, errOut, err := commandOutput(cctx, proc, fmt.Sprintf("python3 -c '%s' %d %d %q", inSandboxScript, floorCells, base, token))
	if err != nil {
		rec.fail(floorCell, fmt.Errorf("in-sandbox cells: %w (stdout %q, stderr %q)", err, out, errOut))
		return
	}
	samples, err := parseMicros(out)
	if err == nil && len(samples) != floorCells {
		err = fmt.Errorf("in-sandbox cells: %d times for %d cells", len(samples), floorCells)
	}
	if err != nil {
		rec.fail(floorCell, err)
		return
	}
	rec.add(floorCell, samples...)
}

// parseMicros parses space-separated microsecond counts.
func parseMicros(s string) ([]time.Duration, error) {
	var ds []time.Duration
	for _, f := range strings.Fields(s) {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("in-sandbox cells printed %q, want microsecond counts", s)
		}
		ds = append(ds, time.Duration(n)*time.Microsecond)
	}
	return ds, nil
}

// createFloors reads the daemon's debug log and returns the restore, wait
// and restore+wait step times of the creates of ids (kind restore: the
// boot snapshot), keyed by floor row.
func createFloors(path string, ids map[string]bool) (map[string][]time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the daemon log: %w", err)
	}
	defer f.Close()
	return parseCreateSteps(f, ids)
}

// parseCreateSteps reads slog text lines ("msg=step ... sandbox=<id>
// op=create kind=restore step=<s> elapsed=<d>") and returns the restore and
// wait steps of ids' creates and, for each create that logged both, their
// sum.
func parseCreateSteps(r io.Reader, ids map[string]bool) (map[string][]time.Duration, error) {
	type pair struct {
		restore, wait time.Duration
		has           int // bit 1: restore, bit 2: wait
	}
	per := map[string]*pair{}
	var order []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, " msg=step ") {
			continue
		}
		kv := map[string]string{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		id := kv["sandbox"]
		if kv["op"] != "create" || kv["kind"] != "restore" || !ids[id] {
			continue
		}
		d, err := time.ParseDuration(kv["elapsed"])
		if err != nil {
			return nil, fmt.Errorf("step line %q: %w", line, err)
		}
		p := per[id]
		if p == nil {
			p = &pair{}
			per[id] = p
			order = append(order, id)
		}
		switch kv["step"] {
		case "restore":
			p.restore, p.has = d, p.has|1
		case "wait":
			p.wait, p.has = d, p.has|2
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the daemon log: %w", err)
	}
	out := map[string][]time.Duration{}
	for _, id := range order {
		p := per[id]
		if p.has&1 != 0 {
			out[floorRestore] = append(out[floorRestore], p.restore)
		}
		if p.has&2 != 0 {
			out[floorWait] = append(out[floorWait], p.wait)
		}
		if p.has == 3 {
			out[floorRestoreWait] = append(out[floorRestoreWait], p.restore+p.wait)
		}
	}
	return out, nil
}

// isFloor reports whether op is a floor row.
func isFloor(op string) bool { return strings.HasPrefix(op, floorPrefix) }
