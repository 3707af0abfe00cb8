package jsonlog

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type ent struct {
	I int    `json:"i"`
	S string `json:"s,omitempty"`
}

func open(t *testing.T, dir string, o Options) *Store {
	t.Helper()
	s, err := Open(dir, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func ints(t *testing.T, raw []json.RawMessage) []int {
	t.Helper()
	out := make([]int, len(raw))
	for i, r := range raw {
		var e ent
		if err := json.Unmarshal(r, &e); err != nil {
			t.Fatalf("entry %d %s: %v", i, r, err)
		}
		out[i] = e.I
	}
	return out
}

func seq(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func TestReloadOrderAcrossRotation(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{MaxLines: 4})
	l := s.Log("sb1.egress")
	for i := 0; i < 10; i++ {
		l.Append(ent{I: i})
		l.Sync() // one at a time: nothing is dropped before it is written
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A new store (a restarted daemon) reads what the first one wrote.
	s2 := open(t, dir, Options{MaxLines: 4})
	got, total, err := s2.Log("sb1.egress").Read(0)
	if err != nil {
		t.Fatal(err)
	}
	// 10 entries, 4 per file: the current file holds 8, 9 and the
	// previous one 4..7; 0..3 went with the first rotation.
	if want := seq(4, 10); fmt.Sprint(ints(t, got)) != fmt.Sprint(want) || total != 10 {
		t.Fatalf("Read = %v total %d, want %v total 10", ints(t, got), total, want)
	}
	got, _, _ = s2.Log("sb1.egress").Read(3)
	if fmt.Sprint(ints(t, got)) != "[7 8 9]" {
		t.Errorf("Read(3) = %v, want the newest three, oldest first", ints(t, got))
	}
	// Appends continue the sequence after the reload.
	l2 := s2.Log("sb1.egress")
	l2.Append(ent{I: 10})
	got, total, _ = l2.Read(0)
	if ints(t, got)[len(got)-1] != 10 || total != 11 {
		t.Errorf("after append: %v total %d", ints(t, got), total)
	}
}

func TestBounds(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{MaxLines: 100, MaxBytes: 2000})
	l := s.Log("flood")
	pad := strings.Repeat("x", 50)
	for i := 0; i < 100000; i++ {
		l.Append(ent{I: i, S: pad})
	}
	l.Sync()
	var size int64
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		fi, _ := de.Info()
		size += fi.Size()
	}
	if len(des) != 2 || size > 2*2000+200 {
		t.Errorf("%d files, %d bytes on disk; want 2 files of at most ~2000 bytes each", len(des), size)
	}
	got, total, err := l.Read(0)
	if err != nil {
		t.Fatal(err)
	}
	is := ints(t, got)
	if total != 100000 || len(is) == 0 || is[len(is)-1] != 99999 {
		t.Fatalf("total %d, last %v; want 100000 and the newest entry kept", total, is)
	}
	for i := 1; i < len(is); i++ {
		if is[i] != is[i-1]+1 {
			t.Fatalf("kept entries not contiguous oldest first: %v", is)
		}
	}
}

func TestTornLastLine(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	l := s.Log("torn")
	for i := 0; i < 3; i++ {
		l.Append(ent{I: i})
	}
	l.Sync()
	_ = s.Close()
	// A kill in the middle of a write: half a line at the end, and a
	// garbage line in the middle.
	p := filepath.Join(dir, "torn.jsonl")
	b, _ := os.ReadFile(p)
	lines := strings.SplitAfter(string(b), "\n")
	b = []byte(lines[0] + "{not json\n" + lines[1] + lines[2] + `{"n":3,"e":{"i":`)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, dir, Options{})
	l2 := s2.Log("torn")
	got, total, err := l2.Read(0)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ints(t, got)) != "[0 1 2]" || total != 3 {
		t.Fatalf("Read = %v total %d, want [0 1 2] total 3", ints(t, got), total)
	}
	// The torn tail is cut off: the next append is a line of its own.
	l2.Append(ent{I: 3})
	l2.Sync()
	s3 := open(t, dir, Options{})
	got, total, _ = s3.Log("torn").Read(0)
	if fmt.Sprint(ints(t, got)) != "[0 1 2 3]" || total != 4 {
		t.Fatalf("after append: %v total %d, want [0 1 2 3] total 4", ints(t, got), total)
	}
}

func TestRemove(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{MaxLines: 2})
	l := s.Log("gone")
	for i := 0; i < 5; i++ {
		l.Append(ent{I: i})
	}
	s.Log("kept").Append(ent{I: 1})
	l.Sync()
	s.Log("kept").Sync()
	if names, _ := s.Names(); fmt.Sprint(names) != "[gone kept]" {
		t.Fatalf("Names = %v", names)
	}
	if err := s.Remove("gone"); err != nil {
		t.Fatal(err)
	}
	// A late append (after the sandbox went) does not bring it back.
	l.Append(ent{I: 9})
	s.Log("gone").Append(ent{I: 9})
	l.Sync()
	if names, _ := s.Names(); fmt.Sprint(names) != "[kept]" {
		t.Fatalf("Names after Remove = %v", names)
	}
	if got, total, _ := s.Log("gone").Read(0); len(got) != 0 || total != 0 {
		t.Errorf("removed log reads %d entries", len(got))
	}
}

func TestInvalidNames(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	for _, n := range []string{"", "../x", "a/b", ".hidden", strings.Repeat("a", 201)} {
		if ValidName(n) {
			t.Errorf("ValidName(%q) = true", n)
		}
		l := s.Log(n)
		l.Append(ent{I: 1})
		l.Sync()
	}
	if names, _ := s.Names(); len(names) != 0 {
		t.Errorf("invalid names wrote files: %v", names)
	}
}

// BenchmarkAppend is the caller's cost of one entry (the writer runs
// concurrently).
func BenchmarkAppend(b *testing.B) {
	s, err := Open(b.TempDir(), Options{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l := s.Log("bench")
	for i := 0; b.Loop(); i++ {
		l.Append(ent{I: i, S: "allowOut 10.0.0.0/8"})
	}
}
