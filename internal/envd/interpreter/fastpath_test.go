//go:build linux

package interpreter

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

func pythonKernel(t *testing.T, s *Server) *jupyterKernel {
	t.Helper()
	e, err := s.defaultContext(context.Background(), "python")
	if err != nil {
		t.Fatal(err)
	}
	return e.kernel.(*jupyterKernel)
}

// Ordinary cells run over the direct channel, keep IPython's semantics
// (magics, !cmd, display, errors, input(), the execution count), and a cell
// that needs ipykernel's asyncio runner falls back to ZeroMQ in the same
// kernel, its count in sequence.
func TestFastChannel(t *testing.T) {
	needTool(t, "/usr/bin/python3", "-c", "import ipykernel")
	s, ts := newTestServer(t)
	u := ts.URL
	run(t, u, rec{"code": "a = 1"})
	k := pythonKernel(t, s)
	if k.fast == nil {
		t.Fatal("the kernel has no fast channel")
	}
	handled, err := k.executeFast(context.Background(), "a += 1", nil, false, func(Output) {})
	if !handled || err != nil {
		t.Fatalf("executeFast(a += 1) = %v, %v; want handled", handled, err)
	}
	handled, err = k.executeFast(context.Background(), "import asyncio\nawait asyncio.sleep(0)", nil, false, func(Output) {})
	if handled || err != nil {
		t.Fatalf("executeFast(top-level await) = %v, %v; want a fallback", handled, err)
	}

	out := run(t, u, rec{"code": "import asyncio\nawait asyncio.sleep(0.01)\na * 10"})
	if got := mainText(out); got != "20" {
		t.Fatalf("await cell: %q (%v)", got, out)
	}
	n1 := executionCount(out)
	out = run(t, u, rec{"code": "a"})
	if executionCount(out) != n1+1 || mainText(out) != "2" {
		t.Fatalf("after the fallback: count %v (want %v), %v", executionCount(out), n1+1, out)
	}

	out = run(t, u, rec{"code": "print('one')\nimport sys; print('two', file=sys.stderr)\n!echo three\n%time x = 1\nfrom IPython.display import display, HTML\ndisplay(HTML('<b>h</b>'))\n'last'"})
	if got := collect(out, "stdout", "text"); !strings.Contains(got, "one\n") || !strings.Contains(got, "three") || !strings.Contains(got, "Wall time") {
		t.Fatalf("stdout %q", got)
	}
	if got := collect(out, "stderr", "text"); got != "two\n" {
		t.Fatalf("stderr %q", got)
	}
	var html string
	for _, r := range results(out) {
		if r["is_main_result"] == false {
			html, _ = r["html"].(string)
		}
	}
	if html != "<b>h</b>" || mainText(out) != "last" {
		t.Fatalf("display/result: %v", out)
	}

	out = run(t, u, rec{"code": "input('?')"})
	if got := collect(out, "error", "name"); got != "StdinNotImplementedError" {
		t.Fatalf("input(): %v", out)
	}
	out = run(t, u, rec{"code": "def f(:\n  pass"})
	if got := collect(out, "error", "name"); got != "SyntaxError" {
		t.Fatalf("syntax error: %v", out)
	}
	// Output is streamed while the cell runs, not held to its end.
	start := time.Now()
	var first time.Duration
	err = k.Execute(context.Background(), "import time\nprint('early', flush=True)\ntime.sleep(1.5)\nprint('late')", nil, func(o Output) {
		if o.Type == "stdout" && first == 0 {
			first = time.Since(start)
		}
	})
	if err != nil || first == 0 || first > time.Second {
		t.Fatalf("first stdout after %v (err %v); want it before the cell's 1.5 s sleep ends", first, err)
	}
}

// The status line of /execute waits for the first records (headerDelay),
// but a record never waits longer than flushDelay: the first stdout of a
// slow cell reaches the client before the cell ends.
func TestExecuteStreamsFirstRecordPromptly(t *testing.T) {
	needTool(t, "/usr/bin/python3", "-c", "import ipykernel")
	_, ts := newTestServer(t)
	run(t, ts.URL, rec{"code": "1"})
	start := time.Now()
	resp, err := http.Post(ts.URL+"/execute", "application/json", strings.NewReader(`{"code":"import time\nprint('early', flush=True)\ntime.sleep(2)"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended without stdout: %v", err)
		}
		if strings.Contains(line, `"early`) {
			break
		}
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Fatalf("first stdout line after %v; want it well before the cell's 2 s sleep ends", d)
	}
}
