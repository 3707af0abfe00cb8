package sandbox

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func testJournal(dir string) *killJournal {
	j := &killJournal{}
	j.init(dir, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return j
}

// Parallel kills' entries all reach the journal (written together when
// they arrive together), finished ones are dropped, and the next start
// reads the open ones.
func TestJournalParallelAppends(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j := testJournal(dir)
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("i%03d", i)
			if err := j.add(pendingTeardown{ID: id, Slot: i, Dir: "/d/" + id}); err != nil {
				t.Errorf("add %s: %v", id, err)
			}
			if i%2 == 0 {
				if err := j.finish(id); err != nil {
					t.Errorf("finish %s: %v", id, err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d records in %d batches", n+n/2, j.done)
	j.close()
	if err := j.add(pendingTeardown{ID: "ilate"}); err == nil {
		t.Error("append after close succeeded")
	}

	got := testJournal(dir).pending()
	if len(got) != n/2 {
		t.Fatalf("next start reads %d open entries, want %d: %v", len(got), n/2, got)
	}
	for i := 1; i < n; i += 2 {
		id := fmt.Sprintf("i%03d", i)
		if e := got[id]; e.Slot != i || e.Dir != "/d/"+id {
			t.Errorf("entry %s = %+v", id, e)
		}
	}
}

// A line torn by a crash is skipped, entries of the previous format
// (teardown/<id>.json) are read, and the start folds both into one new
// file.
func TestJournalTornLineAndLegacyEntries(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := `{"id":"iaaa","slot":1,"dir":"/a"}` + "\n" +
		`{"id":"ibbb","slot":2,"dir":"/b"}` + "\n" +
		`{"id":"iaaa","done":true}` + "\n" +
		`{"id":"iccc","sl` // torn
	if err := os.WriteFile(filepath.Join(dir, journalName), []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "iddd.json"), []byte(`{"id":"iddd","slot":4,"dir":"/d"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".ieee.tmp"), []byte(`{"id":"ie`), 0o600); err != nil {
		t.Fatal(err)
	}
	j := testJournal(dir)
	got := j.pending()
	if len(got) != 2 || got["ibbb"].Slot != 2 || got["iddd"].Slot != 4 {
		t.Fatalf("pending = %v, want ibbb and iddd", got)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != journalName {
		t.Errorf("teardown dir holds %v, want the journal alone", ents)
	}
	if err := j.finish("ibbb"); err != nil {
		t.Fatal(err)
	}
	j.close()
	if got := testJournal(dir).pending(); len(got) != 1 || got["iddd"].Dir != "/d" {
		t.Errorf("after a finish, the next start reads %v, want iddd", got)
	}
}

// A journal that keeps growing is rewritten with its open entries only.
func TestJournalCompacts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j := testJournal(dir)
	if err := j.add(pendingTeardown{ID: "ikeep", Slot: 7}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("/dir", 50)
	for i := range 1500 { // ~250 bytes each: past journalCompactAt
		id := fmt.Sprintf("i%05d", i)
		if err := j.add(pendingTeardown{ID: id, Slot: i, Dir: long}); err != nil {
			t.Fatal(err)
		}
		if err := j.finish(id); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Stat(filepath.Join(dir, journalName))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > journalCompactAt {
		t.Errorf("journal is %d bytes, want at most %d", st.Size(), journalCompactAt)
	}
	j.close()
	if got := testJournal(dir).pending(); len(got) != 1 || got["ikeep"].Slot != 7 {
		t.Errorf("next start reads %v, want ikeep alone", got)
	}
}
