package main

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseKillSteps(t *testing.T) {
	log := strings.Join([]string{
		`time=2026-11-28T21:00:00.000Z level=DEBUG msg=step component=sandbox sandbox=a op=kill kind=answer step=index elapsed=3µs`,
		`time=2026-11-28T21:00:00.001Z level=DEBUG msg=step component=sandbox sandbox=a op=kill kind=answer step=cut elapsed=12.5ms`,
		`time=2026-11-28T21:00:00.002Z level=DEBUG msg=step component=sandbox sandbox=a op=kill kind=answer step=total elapsed=20ms`,
		`time=2026-11-28T21:00:01.000Z level=DEBUG msg=step component=sandbox sandbox=a op=kill kind=teardown step=exit elapsed=1ms`,
		// older builds' lines
		`time=2026-11-28T21:00:02.000Z level=DEBUG msg="stop and cut" component=sandbox sandbox=b stop=4ms cut=86ms`,
		`time=2026-11-28T21:00:02.001Z level=DEBUG msg="sandbox stopped and cut off" component=sandbox sandbox=b journal=30µs total=90ms`,
		`time=2026-11-28T21:00:03.000Z level=DEBUG msg="teardown finished" component=sandbox sandbox=b exit=100µs runtime=2s network=1s`,
		// not the soak's sandbox, another op, a failed step
		`time=2026-11-28T21:00:04.000Z level=DEBUG msg=step component=sandbox sandbox=z op=kill kind=answer step=cut elapsed=9s`,
		`time=2026-11-28T21:00:04.000Z level=DEBUG msg=step component=sandbox sandbox=a op=create kind=restore step=network elapsed=9s`,
		`time=2026-11-28T21:00:04.000Z level=DEBUG msg="step failed" component=sandbox sandbox=a op=kill kind=answer step=cut elapsed=9s err=x`,
	}, "\n")
	got, err := parseKillSteps(strings.NewReader(log), map[string]bool{"a": true, "b": true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]time.Duration{
		killStepPrefix + "index":       {3 * time.Microsecond},
		killStepPrefix + "cut":         {12500 * time.Microsecond, 86 * time.Millisecond},
		killStepPrefix + "total":       {20 * time.Millisecond, 90 * time.Millisecond},
		killStepPrefix + "stop":        {4 * time.Millisecond},
		killStepPrefix + "journal":     {30 * time.Microsecond},
		killTeardownPrefix + "exit":    {time.Millisecond, 100 * time.Microsecond},
		killTeardownPrefix + "runtime": {2 * time.Second},
		killTeardownPrefix + "network": {time.Second},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseKillSteps = %v, want %v", got, want)
	}
}
