package audit

import (
	"fmt"
	"testing"
)

func TestRing(t *testing.T) {
	r := NewRing(3)
	if got := r.Last(0); len(got) != 0 {
		t.Fatalf("empty ring: %v", got)
	}
	for i := 0; i < 5; i++ {
		r.Add(Entry{Rule: fmt.Sprint(i)})
	}
	rules := func(es []Entry) string {
		s := ""
		for _, e := range es {
			s += e.Rule
		}
		return s
	}
	if got := rules(r.Last(0)); got != "234" {
		t.Errorf("Last(0) = %q, want 234 (oldest dropped, oldest first)", got)
	}
	if got := rules(r.Last(2)); got != "34" {
		t.Errorf("Last(2) = %q, want 34", got)
	}
	r2 := NewRing(3)
	r2.Add(Entry{Rule: "a"})
	r2.Add(Entry{Rule: "b"})
	if got := rules(r2.Last(10)); got != "ab" {
		t.Errorf("partial ring Last(10) = %q, want ab", got)
	}
}

func TestBook(t *testing.T) {
	b := NewBook(2)
	b.Add("x", Entry{Rule: "1"})
	b.Add("y", Entry{Rule: "2"})
	b.Add("x", Entry{Rule: "3"})
	b.Add("x", Entry{Rule: "4"})
	if got := b.Last("x", 0); len(got) != 2 || got[0].Rule != "3" || got[1].Rule != "4" {
		t.Errorf("x = %v", got)
	}
	b.Drop("x")
	if got := b.Last("x", 0); got != nil {
		t.Errorf("after Drop: %v", got)
	}
	if got := b.Last("y", 5); len(got) != 1 {
		t.Errorf("y = %v", got)
	}
}
