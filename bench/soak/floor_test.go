package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseCreateSteps(t *testing.T) {
	log := strings.Join([]string{
		`time=2026-11-28T16:02:01.000Z level=DEBUG msg=step component=sandbox sandbox=a op=create kind=restore step=clone elapsed=119ms`,
		`time=2026-11-28T16:02:01.100Z level=DEBUG msg=step component=sandbox sandbox=a op=create kind=restore step=restore elapsed=2.5s`,
		`time=2026-11-28T16:02:01.200Z level=DEBUG msg=step component=sandbox sandbox=b op=create kind=restore step=restore elapsed=1.25s`,
		`time=2026-11-28T16:02:01.300Z level=DEBUG msg=step component=sandbox sandbox=a op=create kind=restore step=wait elapsed=500ms`,
		// not the soak's sandbox, another op, another kind, a failed step:
		`time=2026-11-28T16:02:01.400Z level=DEBUG msg=step component=sandbox sandbox=z op=create kind=restore step=restore elapsed=9s`,
		`time=2026-11-28T16:02:01.500Z level=DEBUG msg=step component=sandbox sandbox=a op=pause kind=memory step=restore elapsed=9s`,
		`time=2026-11-28T16:02:01.600Z level=DEBUG msg=step component=sandbox sandbox=c op=create kind=cold step=wait elapsed=9s`,
		`time=2026-11-28T16:02:01.700Z level=DEBUG msg="step failed" component=sandbox sandbox=b op=create kind=restore step=wait elapsed=9s err="x"`,
		`time=2026-11-28T16:02:01.800Z level=INFO msg="daemon stopped" sandboxes_left_running=0`,
	}, "\n")
	got, err := parseCreateSteps(strings.NewReader(log), map[string]bool{"a": true, "b": true, "c": true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]time.Duration{
		floorRestore:     {2500 * time.Millisecond, 1250 * time.Millisecond},
		floorWait:        {500 * time.Millisecond},
		floorRestoreWait: {3 * time.Second}, // b's wait failed: no sum for b
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseCreateSteps = %v, want %v", got, want)
	}
}

func TestParseMicros(t *testing.T) {
	got, err := parseMicros("4100 5200\n")
	if err != nil || !reflect.DeepEqual(got, []time.Duration{4100 * time.Microsecond, 5200 * time.Microsecond}) {
		t.Fatalf("parseMicros = %v, %v", got, err)
	}
	if _, err := parseMicros("Traceback (most recent call last)"); err == nil {
		t.Fatal("parseMicros accepted a traceback")
	}
}

func TestPrintSummaryFloorRows(t *testing.T) {
	s := Summary{Profile: "ci", Clients: 1, Rounds: 1, Requests: 2,
		Ops: map[string]OpStats{"kill": {Count: 1, P50ms: 100}, "cell": {Count: 1, P50ms: 200}},
		Floors: map[string]OpStats{floorCell: {Count: 10, P50ms: 5}, floorGet: {Count: 5, P50ms: 60},
			floorRestoreWait: {Count: 1, P50ms: 3000}},
	}
	var b bytes.Buffer
	printSummary(&b, s)
	var ops []string
	for _, l := range strings.Split(b.String(), "\n")[2:] { // after the header and the column names
		if f := strings.Fields(l); len(f) > 0 && !strings.HasPrefix(l, "floor rows") {
			ops = append(ops, strings.Join(f[:len(f)-5], " "))
		}
	}
	want := []string{"cell", "kill", floorGet, floorCell, floorRestoreWait}
	if !reflect.DeepEqual(ops, want) {
		t.Fatalf("rows %q, want %q:\n%s", ops, want, b.String())
	}
	if !strings.Contains(b.String(), floorNote) {
		t.Fatalf("no floor note:\n%s", b.String())
	}
	// Without floors the output is the old one: no note.
	s.Floors = nil
	b.Reset()
	printSummary(&b, s)
	if strings.Contains(b.String(), "floor") {
		t.Fatalf("floor text without floors:\n%s", b.String())
	}
}
