package jsonlog

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzRead: whatever a file holds (a crash mid-write, a disk error, an
// edit), reading never fails on its content, returns only entries that
// parse, oldest first, and the next append is read back as the newest
// entry.
func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"n":0,"e":{"i":0}}` + "\n" + `{"n":1,"e":{"i":1}}` + "\n"))
	f.Add([]byte(`{"n":0,"e":{"i":0}}` + "\n" + `{"n":1,"e":{"i"`))
	f.Add([]byte("\n\n{}\nnot json\n" + `{"n":5,"e":null}` + "\n" + `{"n":18446744073709551615,"e":1}`))
	f.Add([]byte(`{"n":18446744073709551615,"e":1}` + "\n"))
	f.Add([]byte(`{"n":3,"e":[1,2]}` + "\r\n" + `{"n":2,"e":"x"}` + "\n"))
	f.Fuzz(func(t *testing.T, content []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "x.jsonl"), content, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(dir, Options{MaxLines: 5}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		l := s.Log("x")
		got, total, err := l.Read(0)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		for _, e := range got {
			if !json.Valid(e) {
				t.Fatalf("invalid entry %q", e)
			}
		}
		if total == 0 && len(got) > 0 {
			t.Fatalf("%d entries but total 0", len(got))
		}
		l.Append(map[string]string{"newest": "yes"})
		got2, total2, err := l.Read(0)
		if err != nil {
			t.Fatalf("Read after append: %v", err)
		}
		if len(got2) == 0 || string(got2[len(got2)-1]) != `{"newest":"yes"}` {
			t.Fatalf("after append the newest entry is %q (total %d → %d)", got2, total, total2)
		}
	})
}
