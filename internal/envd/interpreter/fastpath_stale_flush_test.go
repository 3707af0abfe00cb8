//go:build linux

package interpreter

import (
	"fmt"
	"testing"
)

// ipykernel's OutStream flushes 0.2 s after a write, on a timer in the IOPub
// thread. A quick cell's own timer outlives it: the cell's output has left at
// its end, and the timer fires during whatever cell comes next. It must not
// take that cell's buffered output away from it (the soak's "cell printed
// \"\""): here each quick print cell is followed at once by a cell that
// prints and then runs past the first cell's timer.
func TestFastChannelStaleFlushTimerKeepsNextCellsOutput(t *testing.T) {
	needTool(t, "/usr/bin/python3", "-c", "import ipykernel")
	_, ts := newTestServer(t)
	run(t, ts.URL, rec{"code": "import time"})
	var lost []string
	for i := 0; i < 8; i++ {
		a := fmt.Sprintf("a%d", i)
		if got := collect(run(t, ts.URL, rec{"code": fmt.Sprintf("print(%q)", a)}), "stdout", "text"); got != a+"\n" {
			lost = append(lost, fmt.Sprintf("%s: printed %q", a, got))
		}
		b := fmt.Sprintf("b%d", i)
		if got := collect(run(t, ts.URL, rec{"code": fmt.Sprintf("print(%q)\ntime.sleep(0.3)", b)}), "stdout", "text"); got != b+"\n" {
			lost = append(lost, fmt.Sprintf("%s: printed %q", b, got))
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of 16 cells lost their stdout: %v", len(lost), lost)
	}
}
