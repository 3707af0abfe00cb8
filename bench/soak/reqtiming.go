package main

// Request timing rows (issue 24): the daemon's "request timing" debug lines
// (internal/middleware/timing.go) of the soak's kills and floor GETs,
// printed as "kill request: ..." and "get request: ..." rows, and the kill's
// way between the client and the daemon from both clocks (same host):
//
//   - "<op> request: to handler": the read that returned the request's
//     first bytes → the API handler's entry;
//   - "<op> request: handler": the handler's entry → its return (for a
//     kill, "kill step: total" plus the route, the auth and the lookup);
//   - "<op> request: to write": the handler's return → the answer's write;
//   - "kill request: wrote → read": the client wrote the request (httptrace)
//     → the daemon's read returned it;
//   - "kill request: write → first byte": the daemon wrote the answer → the
//     client's transport saw its first byte;
//   - per kill, so that the p50s compare: "kill request: in the daemon
//     (read → write)", "kill request: answer − in the daemon" (the client's
//     answer time outside the daemon: both hosts' scheduling, the
//     loopback), and "kill request: SDK call − answer" (the SDK's call
//     outside the answer: getting a connection, the request's write by the
//     transport's goroutine, the answer handed back to the caller).
//
// A build without the timing lines prints none of these rows.

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

const (
	killRequestPrefix = "kill request: "
	getRequestPrefix  = "get request: "
	rowToHandler      = "to handler"
	rowHandler        = "handler"
	rowToWrite        = "to write"
	rowWroteToRead    = killRequestPrefix + "wrote → read"
	rowWriteToFirst   = killRequestPrefix + "write → first byte"
	rowInDaemon       = killRequestPrefix + "in the daemon (read → write)"
	rowOutsideDaemon  = killRequestPrefix + "answer − in the daemon"
	rowOutsideAnswer  = killRequestPrefix + "SDK call − answer"
)

// requestTimingOrder is the order of the request timing rows.
var requestTimingOrder = []string{
	rowWroteToRead, killRequestPrefix + rowToHandler, killRequestPrefix + rowHandler,
	killRequestPrefix + rowToWrite, rowWriteToFirst, rowInDaemon, rowOutsideDaemon, rowOutsideAnswer,
	getRequestPrefix + rowToHandler, getRequestPrefix + rowHandler, getRequestPrefix + rowToWrite,
}

// requestTimingNote is printed under the table.
const requestTimingNote = "kill/get request rows (daemon debug log, request timing): read → API handler, the handler, its return → the answer's write; kill wrote → read and write → first byte compare the client's and the daemon's clocks"

// wallTimes are a kill's wall-clock instants on the client: the SDK call's
// start and end, the request written and the answer's first byte.
type wallTimes struct{ start, sent, answered, end time.Time }

// requestTimings reads the daemon's log for the timing of ids' kills and
// GETs; clients holds the kills' client-side times (request written, first
// byte), by sandbox id.
func requestTimings(path string, ids map[string]bool, clients map[string]wallTimes) (map[string][]time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the daemon log: %w", err)
	}
	defer f.Close()
	return parseRequestTimings(f, ids, clients)
}

// parseRequestTimings is requestTimings on a reader of slog text lines.
func parseRequestTimings(r io.Reader, ids map[string]bool, clients map[string]wallTimes) (map[string][]time.Duration, error) {
	out := map[string][]time.Duration{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, ` msg="request timing" `) {
			continue
		}
		kv := map[string]string{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		id, ok := strings.CutPrefix(kv["path"], "/sandboxes/")
		if !ok || strings.Contains(id, "/") || !ids[id] {
			continue
		}
		var prefix string
		switch kv["method"] {
		case "DELETE":
			prefix = killRequestPrefix
		case "GET":
			prefix = getRequestPrefix
		default:
			continue
		}
		for _, k := range []struct{ field, row string }{{"to_handler", rowToHandler}, {"handler", rowHandler}, {"to_write", rowToWrite}} {
			d, err := time.ParseDuration(kv[k.field])
			if err != nil {
				return nil, fmt.Errorf("request timing line %q: %w", line, err)
			}
			out[prefix+k.row] = append(out[prefix+k.row], d)
		}
		c, ok := clients[id]
		if prefix != killRequestPrefix || !ok {
			continue
		}
		readAt, err1 := strconv.ParseInt(kv["read_at"], 10, 64)
		writeAt, err2 := strconv.ParseInt(kv["write_at"], 10, 64)
		if err1 != nil || err2 != nil || readAt == 0 || writeAt == 0 {
			continue
		}
		out[rowWroteToRead] = append(out[rowWroteToRead], time.UnixMicro(readAt).Sub(c.sent))
		out[rowWriteToFirst] = append(out[rowWriteToFirst], c.answered.Sub(time.UnixMicro(writeAt)))
		in := time.UnixMicro(writeAt).Sub(time.UnixMicro(readAt))
		out[rowInDaemon] = append(out[rowInDaemon], in)
		out[rowOutsideDaemon] = append(out[rowOutsideDaemon], c.answered.Sub(c.sent)-in)
		out[rowOutsideAnswer] = append(out[rowOutsideAnswer], c.end.Sub(c.start)-c.answered.Sub(c.sent))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the daemon log: %w", err)
	}
	return out, nil
}
