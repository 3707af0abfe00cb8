package main

import (
	"context"
	"testing"
	"time"
)

func TestPct(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    int
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {1, time.Millisecond}} {
		if got := pct(ds, c.p); got != c.want {
			t.Errorf("pct(%d) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := pct([]time.Duration{7}, 99); got != 7 {
		t.Errorf("pct of one sample = %v", got)
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("pct reordered its input")
	}
}

func TestLoopbackBaseline(t *testing.T) {
	up, down, err := loopbackBaseline(context.Background(), 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	if up <= 0 || down <= 0 {
		t.Fatalf("durations %v %v", up, down)
	}
}
