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

func TestParseRequestTimings(t *testing.T) {
	log := strings.Join([]string{
		`time=2026-11-29T03:00:00.000Z level=DEBUG msg="request timing" component=api method=DELETE path=/sandboxes/a request=r1 read_at=1000000 write_at=1250000 to_handler=2ms handler=200ms to_write=40ms`,
		`time=2026-11-29T03:00:00.000Z level=DEBUG msg="request timing" component=api method=GET path=/sandboxes/a request=r2 read_at=0 write_at=0 to_handler=0s handler=1ms to_write=3ms`,
		// not the soak's sandbox, a sub-resource, another method
		`time=2026-11-29T03:00:00.000Z level=DEBUG msg="request timing" component=api method=DELETE path=/sandboxes/z request=r3 read_at=1 write_at=2 to_handler=9s handler=9s to_write=9s`,
		`time=2026-11-29T03:00:00.000Z level=DEBUG msg="request timing" component=api method=GET path=/sandboxes/a/metrics request=r4 read_at=1 write_at=2 to_handler=9s handler=9s to_write=9s`,
		`time=2026-11-29T03:00:00.000Z level=DEBUG msg="request timing" component=api method=POST path=/sandboxes/a request=r5 read_at=1 write_at=2 to_handler=9s handler=9s to_write=9s`,
	}, "\n")
	clients := map[string]wallTimes{"a": {start: time.UnixMicro(900_000), sent: time.UnixMicro(990_000),
		answered: time.UnixMicro(1_300_000), end: time.UnixMicro(1_400_000)}}
	got, err := parseRequestTimings(strings.NewReader(log), map[string]bool{"a": true}, clients)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]time.Duration{
		killRequestPrefix + rowToHandler: {2 * time.Millisecond},
		killRequestPrefix + rowHandler:   {200 * time.Millisecond},
		killRequestPrefix + rowToWrite:   {40 * time.Millisecond},
		rowWroteToRead:                   {10 * time.Millisecond},
		rowWriteToFirst:                  {50 * time.Millisecond},
		rowInDaemon:                      {250 * time.Millisecond},
		rowOutsideDaemon:                 {60 * time.Millisecond},
		rowOutsideAnswer:                 {190 * time.Millisecond},
		getRequestPrefix + rowToHandler:  {0},
		getRequestPrefix + rowHandler:    {time.Millisecond},
		getRequestPrefix + rowToWrite:    {3 * time.Millisecond},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseRequestTimings = %v, want %v", got, want)
	}
}
