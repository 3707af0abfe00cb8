//go:build linux

package main

import "testing"

func TestReturns(t *testing.T) {
	edges := map[[2]string]bool{}
	// a b a c b b a: re-entries a (from b), b (from c), a (from b).
	got := returns([]string{"a", "b", "a", "c", "b", "b", "a"}, edges)
	if got != 3 {
		t.Fatalf("returns = %d, want 3", got)
	}
	if len(edges) != 2 { // b→a twice, c→b once
		t.Fatalf("distinct return edges = %d, want 2: %v", len(edges), edges)
	}
	if got := returns([]string{"a", "a", "b", "c"}, nil); got != 0 {
		t.Fatalf("returns of a straight path = %d, want 0", got)
	}
}

func TestFilterRequest(t *testing.T) {
	base := []event{{PID: 1, GoID: 5, Func: 1}, {PID: 1, GoID: 5, Func: 2}}
	win := []event{
		{PID: 1, GoID: 5, Func: 1},  // background loop again
		{PID: 1, GoID: 9, Func: 2},  // a new goroutine doing only background work
		{PID: 1, GoID: 10, Func: 1}, // the request: a shared function, then its own
		{PID: 1, GoID: 10, Func: 3},
	}
	kept, dropped := filterRequest(base, win)
	if len(kept) != 1 || len(kept[gkey{1, 10}]) != 2 || dropped != 2 {
		t.Fatalf("kept %v, dropped %d; want only goroutine 10 (2 entries), 2 dropped", kept, dropped)
	}
}
