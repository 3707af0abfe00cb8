package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// The teardown journal (teardown.go) is one append-only file,
// <data>/teardown/journal.log, of JSON lines: a kill appends its entry
// ({"id":…,"slot":…,"dir":…}) before it answers, a finished teardown
// appends {"id":…,"done":true}; a later line of an id replaces an earlier
// one. Every append is written before it returns, and appends from
// parallel kills share one write (group commit: the first caller writes the
// batch that the others joined while it waited).
//
// An append is not fsync'd. What the journal must survive is the daemon's
// death (a SIGKILL, a crash, an OOM kill): the page cache keeps a written
// line then. A host crash kills every sandbox, and the next start re-attaches
// none whose runtime instance or network namespace is gone; the only
// sandboxes that outlive a host crash are paused ones of a cluster node
// (their image is, or goes, to the artifact store), and their kill deletes
// the row (in PostgreSQL, durable) before it answers. Measured under the kill bench's load (bench/README.md),
// an fsync'd append took 26 ms at the median against 0.2 ms for an unsynced
// write, and the kill waits for it. The rewrites (at start, past
// journalCompactAt) are fsync'd: they replace the file.
//
// The next start reads the file (a line torn by a crash is skipped: only the
// last one can be), finishes the open entries and rewrites the file with
// them alone (a temporary file, fsync'd, renamed); a running daemon
// rewrites it the same way once it grew past journalCompactAt. Entries of
// the previous format, one file teardown/<id>.json per kill, are read too
// and folded into the new file.

const (
	// journalName is the journal's file in the teardown directory.
	journalName = "journal.log"
	// journalCompactAt is the size past which a running daemon rewrites
	// the journal with its open entries only.
	journalCompactAt = 256 << 10
)

// errJournalClosed is returned by appends after the manager closed.
var errJournalClosed = errors.New("teardown journal closed")

// journalRecord is one line of the journal.
type journalRecord struct {
	pendingTeardown
	Done bool `json:"done,omitempty"` // the teardown of ID finished
}

// killJournal is the teardown journal of one manager (Manager.journal).
type killJournal struct {
	once sync.Once // init
	dir  string
	log  *slog.Logger

	// mu guards the fields below; cond (on mu) is broadcast whenever a
	// batch was written (or failed).
	mu   sync.Mutex
	cond sync.Cond
	// loaded is set once the file (and legacy entries) were read; prev
	// holds what was open then (the previous run's kills).
	loaded bool
	prev   map[string]pendingTeardown
	// open are the entries not done, as the file holds them once the
	// batches in flight are written.
	open map[string]pendingTeardown
	f    *os.File // nil until the first write
	size int64    // bytes in f
	// buf holds the lines waiting for batch next; done is the last batch
	// written; flushing is set while one caller writes a batch.
	buf      []byte
	next     uint64
	done     uint64
	flushing bool
	// err, once set, fails every later append (a torn write may have left
	// half a line; the next start rewrites the file).
	err    error
	closed bool
}

// journal returns the manager's teardown journal.
func (m *Manager) journal() *killJournal {
	j := &m.kj
	j.once.Do(func() { j.init(m.teardownDir(), m.log) })
	return j
}

// init readies a zero killJournal for the journal in dir.
func (j *killJournal) init(dir string, log *slog.Logger) {
	j.dir = dir
	j.log = log
	j.cond.L = &j.mu
	j.open = map[string]pendingTeardown{}
	j.next = 1
}

// add records t (replacing an earlier entry of its id) and returns once it
// is written.
func (j *killJournal) add(t pendingTeardown) error {
	return j.append(journalRecord{pendingTeardown: t})
}

// finish records that the teardown of id finished.
func (j *killJournal) finish(id string) error {
	return j.append(journalRecord{pendingTeardown: pendingTeardown{ID: id}, Done: true})
}

// append writes r and returns once it is written, in one batch with the
// records appended meanwhile by other callers.
func (j *killJournal) append(r journalRecord) error {
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding teardown journal entry: %w", err)
	}
	line = append(line, '\n')
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.loadLocked(); err != nil {
		return err
	}
	if j.closed {
		return errJournalClosed
	}
	if j.err != nil {
		return j.err
	}
	if r.Done {
		delete(j.open, r.ID)
	} else {
		j.open[r.ID] = r.pendingTeardown
	}
	j.buf = append(j.buf, line...)
	mine := j.next
	for j.done < mine && j.err == nil {
		if j.closed {
			return errJournalClosed // closed while this batch waited
		}
		if j.flushing {
			j.cond.Wait()
			continue
		}
		j.flushLocked()
	}
	if j.done >= mine {
		return nil
	}
	return j.err
}

// flushLocked writes the waiting batch (or, past journalCompactAt, the
// whole journal anew, fsync'd). j.mu is held on entry and on return,
// and released while writing; no other batch is written meanwhile.
func (j *killJournal) flushLocked() {
	j.flushing = true
	batch, n := j.buf, j.next
	j.buf = nil
	j.next++
	var whole []byte
	if j.f == nil || j.size+int64(len(batch)) > journalCompactAt {
		whole = encodeOpen(j.open) // includes batch's records
	}
	f := j.f
	j.mu.Unlock()

	var size int64
	var err error
	if whole != nil {
		var nf *os.File
		nf, err = j.rewrite(whole)
		if err == nil {
			if f != nil {
				_ = f.Close()
			}
			f, size = nf, int64(len(whole))
		}
	} else {
		_, err = f.Write(batch) // not fsync'd: see the top of this file
		size = int64(len(batch))
	}

	j.mu.Lock()
	j.flushing = false
	if err != nil {
		j.err = fmt.Errorf("writing the teardown journal: %w", err)
	} else {
		if whole != nil {
			j.f, j.size = f, size
		} else {
			j.size += size
		}
		j.done = n
	}
	j.cond.Broadcast()
}

// rewrite replaces the journal file by data (durably) and returns the new
// file, open for appending.
func (j *killJournal) rewrite(data []byte) (*os.File, error) {
	if err := os.MkdirAll(j.dir, 0o700); err != nil {
		return nil, err
	}
	tmp := filepath.Join(j.dir, "."+journalName+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(j.dir, journalName))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return nil, err
	}
	if d, err := os.Open(j.dir); err == nil {
		_ = d.Sync() // the rename is durable
		_ = d.Close()
	}
	return os.OpenFile(filepath.Join(j.dir, journalName), os.O_WRONLY|os.O_APPEND, 0o600)
}

// encodeOpen is the journal holding open alone (ordered by id).
func encodeOpen(open map[string]pendingTeardown) []byte {
	ids := make([]string, 0, len(open))
	for id := range open {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []byte
	for _, id := range ids {
		line, err := json.Marshal(journalRecord{pendingTeardown: open[id]})
		if err != nil {
			continue // cannot happen: plain fields
		}
		out = append(out, line...)
		out = append(out, '\n')
	}
	return out
}

// pending returns the entries the previous run left open (read once, at
// the first use of the journal: Reattach at startup).
func (j *killJournal) pending() map[string]pendingTeardown {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.loadLocked(); err != nil {
		j.log.Warn("reading teardown journal", "err", err)
	}
	out := make(map[string]pendingTeardown, len(j.prev))
	for id, t := range j.prev {
		out[id] = t
	}
	return out
}

// loadLocked reads the journal file and the legacy entries once, and folds
// them into one new file. j.mu is held.
func (j *killJournal) loadLocked() error {
	if j.loaded {
		return nil
	}
	j.loaded = true
	j.prev = map[string]pendingTeardown{}
	legacy := j.readLegacy(j.prev)
	if err := j.readLog(j.prev); err != nil && !errors.Is(err, os.ErrNotExist) {
		j.log.Warn("reading teardown journal", "err", err)
	}
	for id, t := range j.prev {
		j.open[id] = t
	}
	// Rewritten now (at start, in Reattach), not by the first kill: the
	// rewrite's fsyncs took 0.8 s under the soak's load.
	f, err := j.rewrite(encodeOpen(j.open))
	if err != nil {
		return fmt.Errorf("rewriting teardown journal: %w", err)
	}
	j.f, j.size = f, 0
	if st, err := f.Stat(); err == nil {
		j.size = st.Size()
	}
	for _, p := range legacy {
		_ = os.Remove(p)
	}
	return nil
}

// readLog adds the open entries of the journal file to into.
func (j *killJournal) readLog(into map[string]pendingTeardown) error {
	f, err := os.Open(filepath.Join(j.dir, journalName))
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var r journalRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || runtime.ValidID(r.ID) != nil {
			j.log.Warn("skipping unreadable teardown journal line", "line", n, "err", err)
			continue
		}
		if r.Done {
			delete(into, r.ID)
		} else {
			into[r.ID] = r.pendingTeardown
		}
	}
	return sc.Err()
}

// readLegacy adds the entries of the previous format (teardown/<id>.json)
// to into and returns the files to remove once they are in the new file
// (unreadable ones and temporary files included).
func (j *killJournal) readLegacy(into map[string]pendingTeardown) []string {
	ents, err := os.ReadDir(j.dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			j.log.Warn("reading teardown journal", "err", err)
		}
		return nil
	}
	var files []string
	for _, en := range ents {
		name := en.Name()
		if name == journalName {
			continue
		}
		p := filepath.Join(j.dir, name)
		id, ok := strings.CutSuffix(name, ".json")
		if !ok || strings.HasPrefix(name, ".") {
			_ = os.Remove(p) // a write cut short (either format)
			continue
		}
		files = append(files, p)
		data, err := os.ReadFile(p)
		var t pendingTeardown
		if err == nil {
			err = json.Unmarshal(data, &t)
		}
		if err != nil || t.ID != id || runtime.ValidID(id) != nil {
			j.log.Warn("dropping unreadable teardown journal entry", "file", name, "err", err)
			continue
		}
		into[id] = t
	}
	return files
}

// close waits for the batch in flight and closes the file; later appends
// fail (what they would have recorded is redone or finished at the next
// start).
func (j *killJournal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.closed = true
	for j.flushing {
		j.cond.Wait()
	}
	if j.f != nil {
		_ = j.f.Close()
		j.f = nil
	}
}
