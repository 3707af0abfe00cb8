package main

// Kill steps (issue 24): where a kill's time goes inside the daemon, read
// from its debug log (-daemon-log) after the run and matched by sandbox id,
// printed as "kill step: ..." rows under the floors. Two log formats:
//
//   - step lines (op=kill, internal/sandbox/steps.go): kind=answer, the
//     steps before the kill answers (index, journal, stop, cut, row, log and
//     total, the whole kill inside the daemon), and kind=teardown, the
//     background teardown (exit, runtime, network, row), printed as
//     "kill step: <step>" and "kill teardown: <step>";
//   - "kill client: connect" and "kill client: answer": the client's side
//     of the same DELETE (net/http/httptrace): from asking the transport for
//     a connection until it has one (a dial when no idle connection is
//     left: http.DefaultTransport keeps 2 per host for the soak's 40
//     clients), and from the request written until the first byte of the
//     answer (the daemon's whole handling, its scheduling included);
//   - the lines of builds before those steps ("stop and cut" with stop= and
//     cut=, "sandbox stopped and cut off" with journal= and total=, "teardown
//     finished" with exit=, runtime=, network=), mapped to the same rows, so
//     that an old binary's run prints them too.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"time"
)

const (
	killStepPrefix     = "kill step: "
	killTeardownPrefix = "kill teardown: "
	killClientPrefix   = "kill client: "
	killConnect        = killClientPrefix + "connect"
	killAnswer         = killClientPrefix + "answer"
)

// killStepOrder is the order of the kill step rows in the table.
var killStepOrder = []string{
	killConnect, killAnswer,
	killStepPrefix + "index", killStepPrefix + "journal", killStepPrefix + "stop", killStepPrefix + "cut",
	killStepPrefix + "row", killStepPrefix + "log", killStepPrefix + "total",
	killTeardownPrefix + "exit", killTeardownPrefix + "runtime", killTeardownPrefix + "network", killTeardownPrefix + "row",
}

// killStepNote is printed under the table (with requestTimingNote when
// the daemon logged request timings).
const killStepNote = "kill client rows: the DELETE's connection and its answer's first byte after the request was written; kill step rows (daemon debug log): total is the kill inside the daemon, index to answer"

// isKillStep reports whether op is a kill step row.
func isKillStep(op string) bool {
	return strings.HasPrefix(op, killStepPrefix) || strings.HasPrefix(op, killTeardownPrefix) ||
		strings.HasPrefix(op, killClientPrefix) || strings.HasPrefix(op, killRequestPrefix) ||
		strings.HasPrefix(op, getRequestPrefix)
}

// traceKill returns ctx traced for the kill's client rows, and the function
// that records them once the kill returned (nothing when it failed).
func traceKill(ctx context.Context, rec *recorder, id string) (context.Context, func(error)) {
	var mu sync.Mutex
	var getConn, gotConn, wrote, first time.Time
	start := time.Now()
	at := func(p *time.Time) {
		mu.Lock()
		*p = time.Now()
		mu.Unlock()
	}
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GetConn:              func(string) { at(&getConn) },
		GotConn:              func(httptrace.GotConnInfo) { at(&gotConn) },
		WroteRequest:         func(httptrace.WroteRequestInfo) { at(&wrote) },
		GotFirstResponseByte: func() { at(&first) },
	})
	return ctx, func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil || getConn.IsZero() || gotConn.IsZero() || wrote.IsZero() || first.IsZero() {
			return
		}
		rec.add(killConnect, gotConn.Sub(getConn))
		rec.add(killAnswer, first.Sub(wrote))
		rec.mu.Lock()
		rec.killWall[id] = wallTimes{start: start, sent: wrote, answered: first, end: time.Now()}
		rec.mu.Unlock()
	}
}

// killSteps reads the daemon's debug log and returns the kill step times of
// ids' kills, keyed by row.
func killSteps(path string, ids map[string]bool) (map[string][]time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the daemon log: %w", err)
	}
	defer f.Close()
	return parseKillSteps(f, ids)
}

// legacyKillLines maps the messages of older builds to their fields' rows.
var legacyKillLines = map[string]map[string]string{
	`msg="stop and cut"`:                {"stop": killStepPrefix + "stop", "cut": killStepPrefix + "cut"},
	`msg="sandbox stopped and cut off"`: {"journal": killStepPrefix + "journal", "row": killStepPrefix + "row", "total": killStepPrefix + "total"},
	`msg="teardown finished"`: {"exit": killTeardownPrefix + "exit", "runtime": killTeardownPrefix + "runtime",
		"network": killTeardownPrefix + "network"},
}

// parseKillSteps reads slog text lines and returns the kill steps of ids.
func parseKillSteps(r io.Reader, ids map[string]bool) (map[string][]time.Duration, error) {
	out := map[string][]time.Duration{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var fields map[string]string // field → row
		switch {
		case strings.Contains(line, " msg=step ") && strings.Contains(line, " op=kill "):
		default:
			for msg, f := range legacyKillLines {
				if strings.Contains(line, " "+msg+" ") {
					fields = f
				}
			}
			if fields == nil {
				continue
			}
		}
		kv := map[string]string{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		if !ids[kv["sandbox"]] {
			continue
		}
		add := func(row, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("kill step line %q: %w", line, err)
			}
			out[row] = append(out[row], d)
			return nil
		}
		if fields == nil {
			prefix := killStepPrefix
			if kv["kind"] == "teardown" {
				prefix = killTeardownPrefix
			}
			if err := add(prefix+kv["step"], kv["elapsed"]); err != nil {
				return nil, err
			}
			continue
		}
		for k, row := range fields {
			if v, ok := kv[k]; ok {
				if err := add(row, v); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the daemon log: %w", err)
	}
	return out, nil
}
