//go:build linux

package interpreter

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The kernel holds a cell's count (and, with the default interactivity, its
// result) until its next record, so that a quick cell's records leave in
// one pipe write. That may only batch: the count still comes first, and
// with ast_node_interactivity "all" a result that has more work after it is
// streamed at once, not held to the cell's end.
func TestFastChannelDeferredRecordsKeepOrderAndStreaming(t *testing.T) {
	needTool(t, "/usr/bin/python3", "-c", "import ipykernel")
	s, ts := newTestServer(t)
	out := run(t, ts.URL, rec{"code": "print('a')\n1+1"})
	if len(out) < 3 || out[0]["type"] != "number_of_executions" || collect(out, "stdout", "text") != "a\n" || mainText(out) != "2" {
		t.Fatalf("records %v; want the count first, then stdout and the result", out)
	}
	k := pythonKernel(t, s)
	run(t, ts.URL, rec{"code": "get_ipython().ast_node_interactivity = 'all'"})
	defer run(t, ts.URL, rec{"code": "get_ipython().ast_node_interactivity = 'last_expr'"})

	start := time.Now()
	var types []string
	var firstResult time.Duration
	err := k.Execute(context.Background(), "6 * 7\nimport time\ntime.sleep(1.5)\n'end'", nil, func(o Output) {
		types = append(types, o.Type)
		if o.Type == "result" && firstResult == 0 {
			firstResult = time.Since(start)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(types) != 3 || types[0] != "number_of_executions" || types[1] != "result" || types[2] != "result" {
		t.Fatalf("outputs %v; want the count and two results", types)
	}
	if firstResult == 0 || firstResult > time.Second {
		t.Fatalf("first result after %v; want it before the cell's 1.5 s sleep ends", firstResult)
	}
}

// A kernel that dies in a cell before the cell's first record reaches the
// agent (its count waits in the kernel) is reported as died and restarted,
// not taken for a fast channel that failed to install (which sent the cell
// to the dead kernel's ZeroMQ sockets: "UnexpectedEndOfExecution").
func TestFastChannelKernelDiesBeforeFirstRecord(t *testing.T) {
	needTool(t, "/usr/bin/python3", "-c", "import ipykernel")
	s, ts := newTestServer(t)
	run(t, ts.URL, rec{"code": "1"})
	k := pythonKernel(t, s)
	err := k.Execute(context.Background(), "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", nil, func(Output) {})
	if !errors.Is(err, ErrDied) {
		t.Fatalf("Execute of a cell that kills its kernel: %v; want ErrDied", err)
	}
	out := run(t, ts.URL, rec{"code": "6 * 7"})
	if mainText(out) != "42" {
		t.Fatalf("after the restart: %v", out)
	}
	if k.fast == nil {
		t.Fatal("the restarted kernel runs without its fast channel")
	}
}
