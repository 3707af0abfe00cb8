package audit

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/jsonlog"
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
	b := NewBook(2, nil)
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

// TestBookPersists: a book with a store (a restarted daemon) starts each
// sandbox with what the previous one recorded, counts what was dropped, and
// appends after it; Drop removes the log.
func TestBookPersists(t *testing.T) {
	dir := t.TempDir()
	logs, err := jsonlog.Open(dir, jsonlog.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := NewBook(3, logs)
	dst := netip.MustParseAddr("192.0.2.7")
	at := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	for i := 0; i < 5; i++ {
		b.Add("sb", Entry{Time: at.Add(time.Duration(i) * time.Second), Kind: KindConn, Decision: Denied,
			Rule: fmt.Sprint(i), Protocol: "tcp", Dst: dst, Port: 443})
	}
	b.Add("sb", Entry{Time: at.Add(time.Minute), Kind: KindDNS, Decision: Allowed, Rule: "allowOut a.test",
		Name: "a.test", QType: "A", Answers: []netip.Addr{dst}})
	before := b.Last("sb", 0)
	if b.Dropped("sb") != 3 {
		t.Errorf("Dropped = %d, want 3 (6 added, 3 kept)", b.Dropped("sb"))
	}
	if err := logs.Close(); err != nil {
		t.Fatal(err)
	}

	logs2, err := jsonlog.Open(dir, jsonlog.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer logs2.Close()
	b2 := NewBook(3, logs2)
	after := b2.Last("sb", 0)
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("after reload:\n got %+v\nwant %+v", after, before)
	}
	if b2.Dropped("sb") != 3 {
		t.Errorf("Dropped after reload = %d, want 3", b2.Dropped("sb"))
	}
	b2.Add("sb", Entry{Rule: "new"})
	if got := b2.Last("sb", 0); len(got) != 3 || got[2].Rule != "new" || got[1].Kind != KindDNS {
		t.Errorf("append after reload: %+v", got)
	}
	b2.Drop("sb")
	if names, _ := logs2.Names(); len(names) != 0 {
		t.Errorf("logs left after Drop: %v", names)
	}
}
