package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseLog(t *testing.T) {
	log := `time=2026-11-28T20:35:53.563Z level=INFO msg="sandbox created from the warm pool" component=sandbox sandbox=a1 template=code-interpreter-v1 waited_for_fill=true elapsed=503.399043ms
time=2026-11-28T20:35:53.609Z level=DEBUG msg=step component=sandbox sandbox=a1 op=pool kind=fill step=restore elapsed=500ms
time=2026-11-28T20:35:53.609Z level=DEBUG msg=step component=sandbox sandbox=a1 op=create kind=pool step=claim elapsed=1.5s
time=2026-11-28T20:35:53.500Z level=DEBUG msg="sandbox restored" component=gvisor id=a1 took=420ms
time=2026-11-28T20:35:53.609Z level=DEBUG msg=step component=sandbox sandbox=b2 op=create kind=restore step=restore elapsed=700ms
time=2026-11-28T20:35:53.609Z level=DEBUG msg="step failed" component=sandbox sandbox=c3 op=create kind=restore step=restore elapsed=1s err="x y"
`
	got, err := parseLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	a, b := got["a1"], got["b2"]
	if a == nil || !a.pool || !a.waited || a.restore || a.steps["pool/fill/restore"] != 500*time.Millisecond || a.steps["create/pool/claim"] != 1500*time.Millisecond || a.steps[bareRestore] != 420*time.Millisecond {
		t.Errorf("a1: %+v", a)
	}
	if b == nil || b.pool || !b.restore || b.steps["create/restore/restore"] != 700*time.Millisecond {
		t.Errorf("b2: %+v", b)
	}
	if got["c3"] != nil {
		t.Errorf("a failed step counted: %+v", got["c3"])
	}
}
