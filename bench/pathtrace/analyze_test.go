//go:build linux

package main

import "testing"

func TestReturns(t *testing.T) {
	edges := map[[2]int]bool{}
	// Files a b a c b b a, functions 1 2 3 4 5 6 7: re-entries at 3 (from
	// 2), 5 (from 4) and 7 (from 6).
	got := returns([]string{"a", "b", "a", "c", "b", "b", "a"}, []int{1, 2, 3, 4, 5, 6, 7}, edges)
	if got != 3 || len(edges) != 3 {
		t.Fatalf("returns = %d (%d distinct), want 3 (3)", got, len(edges))
	}
	// A loop bouncing between two files: many returns, one distinct.
	edges = map[[2]int]bool{}
	got = returns([]string{"a", "b", "a", "b", "a", "b", "a"}, []int{1, 2, 1, 2, 1, 2, 1}, edges)
	if got != 5 || len(edges) != 2 { // b→a (2→1) and a→b (1→2)
		t.Fatalf("loop: returns = %d (%d distinct), want 5 (2): %v", got, len(edges), edges)
	}
	if got := returns([]string{"a", "a", "b", "c"}, []int{1, 2, 3, 4}, nil); got != 0 {
		t.Fatalf("returns of a straight path = %d, want 0", got)
	}
}

func TestFilterRequest(t *testing.T) {
	base := []event{{PID: 1, GoID: 5, Func: 1}, {PID: 1, GoID: 5, Func: 2}}
	win := []event{
		{PID: 1, GoID: 5, Func: 1},  // background loop again
		{PID: 1, GoID: 5, Func: 4},  // and given new work by the request: still background
		{PID: 1, GoID: 9, Func: 2},  // a new goroutine doing only background work
		{PID: 1, GoID: 10, Func: 1}, // the request: a shared function, then its own
		{PID: 1, GoID: 10, Func: 3},
	}
	kept, dropped := filterRequest(base, win)
	if len(kept) != 1 || len(kept[gkey{1, 10}]) != 2 || dropped != 3 {
		t.Fatalf("kept %v, dropped %d; want only goroutine 10 (2 entries), 3 dropped", kept, dropped)
	}
}
