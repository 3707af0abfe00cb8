//go:build linux

package process

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

type frame struct {
	flag byte
	data []byte
}

// postStream sends one Connect+JSON server-stream request and returns the
// response frames.
func postStream(t *testing.T, url, path string, hdr map[string]string, body string) (*http.Response, []frame) {
	t.Helper()
	var buf bytes.Buffer
	buf.WriteByte(0)
	_ = binary.Write(&buf, binary.BigEndian, uint32(len(body)))
	buf.WriteString(body)
	req, err := http.NewRequestWithContext(ctxT(t, 30*time.Second), http.MethodPost, url+path, &buf)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var frames []frame
	for {
		var head [5]byte
		if _, err := io.ReadFull(resp.Body, head[:]); err != nil {
			if err != io.EOF {
				t.Fatalf("reading frame header: %v", err)
			}
			return resp, frames
		}
		data := make([]byte, binary.BigEndian.Uint32(head[1:]))
		if _, err := io.ReadFull(resp.Body, data); err != nil {
			t.Fatalf("reading frame: %v", err)
		}
		frames = append(frames, frame{head[0], data})
	}
}

func postUnary(t *testing.T, url, path, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctxT(t, 10*time.Second), http.MethodPost, url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("unary content type %q", ct)
	}
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("decoding unary body: %v", err)
	}
	return resp.StatusCode, out
}

func TestWireStartEnvelopes(t *testing.T) {
	e := newEnv(t)
	resp, frames := postStream(t, e.url, "/process.Process/Start", map[string]string{"Keepalive-Ping-Interval": "50"},
		`{"process":{"cmd":"/bin/bash","args":["-l","-c","printf hi; exit 2"],"envs":{},"cwd":"/tmp"},"stdin":false}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("status %d, type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if len(frames) < 3 {
		t.Fatalf("frames = %d", len(frames))
	}
	var first map[string]map[string]map[string]any
	if err := json.Unmarshal(frames[0].data, &first); err != nil || frames[0].flag != 0 {
		t.Fatalf("first frame %q flag %d: %v", frames[0].data, frames[0].flag, err)
	}
	if pid, ok := first["event"]["start"]["pid"].(float64); !ok || pid <= 0 {
		t.Errorf("first frame %s is not start{pid}", frames[0].data)
	}
	if got := strings.ReplaceAll(string(frames[1].data), " ", ""); got != `{"event":{"data":{"stdout":"aGk="}}}` {
		t.Errorf("data frame %s", got)
	}
	var end map[string]any
	if err := json.Unmarshal(frames[len(frames)-2].data, &end); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"event": map[string]any{"end": map[string]any{
		"exitCode": 2.0, "exited": true, "status": "exit status 2", "error": "exit status 2"}}}
	if !reflect.DeepEqual(end, want) {
		t.Errorf("end frame %s", frames[len(frames)-2].data)
	}
	last := frames[len(frames)-1]
	if last.flag != 0x02 || string(last.data) != "{}" {
		t.Errorf("end-stream frame flag %#x %q", last.flag, last.data)
	}
}

func TestWireUnaryShapes(t *testing.T) {
	e := newEnv(t)
	status, body := postUnary(t, e.url, "/process.Process/List", `{}`)
	if status != 200 {
		t.Fatalf("List status %d %v", status, body)
	}
	status, body = postUnary(t, e.url, "/process.Process/SendSignal", `{"process":{"pid":4000000},"signal":"SIGNAL_SIGKILL"}`)
	if status != 404 || body["code"] != "not_found" || body["message"] == "" {
		t.Errorf("SendSignal unknown: %d %v", status, body)
	}
	// Numeric enum values are accepted too.
	status, body = postUnary(t, e.url, "/process.Process/SendSignal", `{"process":{"pid":4000000},"signal":9}`)
	if status != 404 {
		t.Errorf("numeric signal: %d %v", status, body)
	}

	// A listed process in JSON: config always present, camelCase keys.
	s, frames := startAsync(t, e, `{"process":{"cmd":"sleep","args":["30"]},"tag":"t1"}`)
	defer s()
	_ = frames
	status, body = postUnary(t, e.url, "/process.Process/List", `{}`)
	procs, _ := body["processes"].([]any)
	if status != 200 || len(procs) != 1 {
		t.Fatalf("List: %d %v", status, body)
	}
	p := procs[0].(map[string]any)
	cfg, ok := p["config"].(map[string]any)
	if !ok || cfg["cmd"] != "sleep" || p["tag"] != "t1" || p["pid"] == nil {
		t.Errorf("listed process %v", p)
	}
}

// startAsync starts a process over raw HTTP without reading its stream and
// returns a function that kills it.
func startAsync(t *testing.T, e *env, body string) (func(), chan []frame) {
	t.Helper()
	ch := make(chan []frame, 1)
	before := len(listPids(e))
	go func() {
		_, frames := postStream(t, e.url, "/process.Process/Start", nil, body)
		ch <- frames
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(listPids(e)) == before {
		if time.Now().After(deadline) {
			t.Fatal("process did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return func() { killAll(e.svc); <-ch }, ch
}

func listPids(e *env) []uint32 {
	e.svc.mu.Lock()
	defer e.svc.mu.Unlock()
	var out []uint32
	for pid, p := range e.svc.procs {
		if !p.ended() {
			out = append(out, pid)
		}
	}
	return out
}

func TestWireLifetimeDeadline(t *testing.T) {
	e := newEnv(t)
	start := time.Now()
	_, frames := postStream(t, e.url, "/process.Process/Start", map[string]string{"Connect-Timeout-Ms": "700"},
		`{"process":{"cmd":"/bin/sh","args":["-c","sleep 30 & sleep 30"]}}`)
	elapsed := time.Since(start)
	if elapsed < 600*time.Millisecond || elapsed > 5*time.Second {
		t.Errorf("stream lasted %v for a 700 ms lifetime", elapsed)
	}
	if len(frames) < 2 {
		t.Fatalf("frames %v", frames)
	}
	var first struct {
		Event struct{ Start struct{ Pid int } }
	}
	_ = json.Unmarshal(frames[0].data, &first)
	last := frames[len(frames)-1]
	var endStream struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(last.data, &endStream); err != nil || last.flag != 0x02 || endStream.Error.Code != "deadline_exceeded" {
		t.Fatalf("last frame flag %#x %s", last.flag, last.data)
	}
	if first.Event.Start.Pid == 0 {
		t.Fatal("no start pid")
	}
	waitGone(t, first.Event.Start.Pid)
	// The whole group is gone (zombies awaiting their reaper count as gone).
	out, _ := exec.Command("pgrep", "-g", strconv.Itoa(first.Event.Start.Pid)).Output()
	for _, f := range strings.Fields(string(out)) {
		pid, _ := strconv.Atoi(f)
		waitGone(t, pid)
	}
}

func TestReaperReapsOnlyOrphans(t *testing.T) {
	needRoot(t)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go NewReaper(slog.New(slog.NewTextHandler(testWriter{t}, nil))).Run(ctx)

	e := newEnv(t)
	// The shell exits at once; its background child is re-parented to us and
	// becomes a zombie when it exits.
	r := e.run(t, sh("sleep 0.2 >/dev/null 2>&1 & echo $!"), nil)
	orphan := 0
	if err := json.Unmarshal(bytes.TrimSpace(r.stdout.Bytes()), &orphan); err != nil || orphan == 0 {
		t.Fatalf("orphan pid from %q: %v", r.stdout.String(), err)
	}
	// Meanwhile tracked children keep their exit statuses.
	for i := range 20 {
		code := i % 4
		res := e.run(t, sh("sleep 0.05; exit "+strconv.Itoa(code)), nil)
		if int(res.end.GetExitCode()) != code {
			t.Fatalf("exit status stolen: got %v want %d", res.end, code)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat("/proc/" + strconv.Itoa(orphan)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			st, ppid, _ := readStat(orphan)
			t.Fatalf("orphan %d not reaped (state %c, ppid %d)", orphan, st, ppid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
