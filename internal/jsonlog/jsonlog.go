package jsonlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Defaults of Options.
const (
	DefaultMaxLines = 1000
	DefaultMaxBytes = 512 << 10
)

// maxGone is how many removed names a Store remembers (appends to them are
// ignored, so a late entry cannot bring a removed log back).
const maxGone = 4096

// maxSeq bounds a sequence number read back: larger ones are junk (no log
// gets near it), and would overflow the count.
const maxSeq = 1 << 53

// Options bound each log.
type Options struct {
	// MaxLines and MaxBytes bound the current file; the previous file is
	// at most as large (plus one line). Defaults DefaultMaxLines and
	// DefaultMaxBytes.
	MaxLines int
	MaxBytes int64
}

// Store holds the logs of one directory. It is safe for concurrent use.
type Store struct {
	dir  string
	opts Options
	log  *slog.Logger

	mu sync.Mutex
	// logs are the handles given out; dirty those with queued entries;
	// gone the names removed recently (goneOrder oldest first); closed is
	// set by Close.
	logs      map[string]*Log
	dirty     []*Log
	gone      map[string]bool
	goneOrder []string
	closed    bool

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

// Open creates dir if needed and starts the writer.
func Open(dir string, opts Options, log *slog.Logger) (*Store, error) {
	if opts.MaxLines <= 0 {
		opts.MaxLines = DefaultMaxLines
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating log dir: %w", err)
	}
	s := &Store{dir: dir, opts: opts, log: log, logs: map[string]*Log{}, gone: map[string]bool{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go s.writer()
	return s, nil
}

// ValidName reports whether name can name a log: letters, digits, '-',
// '_' and '.', not starting with '.', at most 200 bytes.
func ValidName(name string) bool {
	if name == "" || len(name) > 200 || name[0] == '.' {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// Log returns the handle of log name. An invalid or recently removed name
// gives a handle that keeps nothing.
func (s *Store) Log(name string) *Log {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.logs[name]; ok {
		return l
	}
	l := &Log{s: s, name: name, removed: !ValidName(name) || s.gone[name]}
	if !l.removed {
		s.logs[name] = l
	}
	return l
}

// Remove deletes log name (its files, and whatever is queued) and ignores
// later appends to it.
func (s *Store) Remove(name string) error {
	if !ValidName(name) {
		return nil
	}
	s.mu.Lock()
	l := s.logs[name]
	delete(s.logs, name)
	if !s.gone[name] {
		s.gone[name] = true
		s.goneOrder = append(s.goneOrder, name)
		if len(s.goneOrder) > maxGone {
			delete(s.gone, s.goneOrder[0])
			s.goneOrder = s.goneOrder[1:]
		}
	}
	s.mu.Unlock()
	if l != nil {
		l.wmu.Lock() // wait for a write in progress
		defer l.wmu.Unlock()
		l.mu.Lock()
		l.removed, l.pending = true, nil
		l.mu.Unlock()
	}
	var errs []error
	for _, p := range []string{s.path(name, false), s.path(name, true)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Names lists the logs that have files, sorted.
func (s *Store) Names() ([]string, error) {
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("listing logs: %w", err)
	}
	var out []string
	for _, de := range des {
		n := de.Name()
		if !strings.HasSuffix(n, ".jsonl") {
			continue
		}
		n = strings.TrimSuffix(n, ".jsonl")
		n = strings.TrimSuffix(n, ".1")
		if len(out) == 0 || out[len(out)-1] != n {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Close writes everything queued and stops the writer; later appends are
// written at once.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	return nil
}

func (s *Store) path(name string, prev bool) string {
	if prev {
		return filepath.Join(s.dir, name+".1.jsonl")
	}
	return filepath.Join(s.dir, name+".jsonl")
}

// queue hands l to the writer (or writes it now once closed).
func (s *Store) queue(l *Log) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.flush()
		return
	}
	s.dirty = append(s.dirty, l)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// writer writes queued entries: whatever arrives while a batch is being
// written makes the next batch (group commit, no timer).
func (s *Store) writer() {
	defer close(s.done)
	for {
		stopping := false
		select {
		case <-s.wake:
		case <-s.stop:
			stopping = true
		}
		s.mu.Lock()
		batch := s.dirty
		s.dirty = nil
		s.mu.Unlock()
		for _, l := range batch {
			l.flush()
		}
		if stopping {
			return
		}
	}
}

// Log is one log. Read it (once) before appending to learn what it holds.
type Log struct {
	s    *Store
	name string

	// wmu serialises reading and writing the files; it guards lines and
	// size.
	wmu   sync.Mutex
	lines int   // lines in the current file
	size  int64 // bytes in the current file
	// scanned is set once the files were read (write position known).
	scanned atomic.Bool

	mu sync.Mutex
	// pending are the entries not written yet (at most 2×MaxLines: older
	// ones are dropped when the disk falls behind); next is the sequence number
	// of the next entry; queued is set while the writer has l; removed
	// once the log is gone.
	pending []record
	next    uint64
	queued  bool
	removed bool
}

type record struct {
	n uint64
	v any
}

// line is one line of a file.
type line struct {
	N uint64          `json:"n"`
	E json.RawMessage `json:"e"`
}

// Append queues v (encoded with encoding/json by the writer; v must not
// change afterwards).
func (l *Log) Append(v any) {
	l.ensureScanned()
	l.mu.Lock()
	if l.removed {
		l.mu.Unlock()
		return
	}
	l.pending = append(l.pending, record{l.next, v})
	l.next++
	if len(l.pending) > 2*l.s.opts.MaxLines {
		// The disk fell behind: keep the newest MaxLines (amortised:
		// trimmed once per MaxLines appends).
		l.pending = append(l.pending[:0:0], l.pending[len(l.pending)-l.s.opts.MaxLines:]...)
	}
	queue := !l.queued
	l.queued = true
	l.mu.Unlock()
	if queue {
		l.s.queue(l)
	}
}

// Sync writes what is queued now.
func (l *Log) Sync() { l.flush() }

// Read returns the newest max entries on disk (all when max <= 0), oldest
// first, and how many entries the log has had in all (the sequence number
// of the next one). Lines that do not parse are skipped. Entries queued
// and not written yet are written first.
func (l *Log) Read(max int) (entries []json.RawMessage, total uint64, err error) {
	l.flush()
	l.wmu.Lock()
	defer l.wmu.Unlock()
	lines, total, err := l.scan()
	if max > 0 && len(lines) > max {
		lines = lines[len(lines)-max:]
	}
	entries = make([]json.RawMessage, len(lines))
	for i, ln := range lines {
		entries[i] = ln.E
	}
	return entries, total, err
}

func (l *Log) ensureScanned() {
	if l.scanned.Load() {
		return
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if !l.scanned.Load() {
		if _, _, err := l.scan(); err != nil {
			l.s.log.Warn("reading log", "log", l.name, "err", err)
		}
	}
}

// scan reads both files (l.wmu held), cuts a torn last line off the current
// one, and sets the write position and the next sequence number.
func (l *Log) scan() ([]line, uint64, error) {
	l.mu.Lock()
	removed := l.removed
	l.mu.Unlock()
	if removed {
		return nil, 0, nil
	}
	prev, _, _, err1 := readFile(l.s.path(l.name, true))
	cur, complete, nlines, err2 := readFile(l.s.path(l.name, false))
	all := append(prev, cur...)
	// Lines are written in order; sorting only guards against a file
	// pair left by a rotation cut short.
	slices.SortStableFunc(all, func(a, b line) int {
		switch {
		case a.N < b.N:
			return -1
		case a.N > b.N:
			return 1
		}
		return 0
	})
	var total uint64
	if len(all) > 0 {
		total = all[len(all)-1].N + 1
	}
	var err3 error
	if fi, err := os.Stat(l.s.path(l.name, false)); err == nil && fi.Size() > complete {
		err3 = os.Truncate(l.s.path(l.name, false), complete) // a torn last line
	}
	l.lines, l.size = nlines, complete
	l.scanned.Store(true)
	l.mu.Lock()
	if total > l.next {
		l.next = total
	}
	total = l.next
	l.mu.Unlock()
	return all, total, errors.Join(err1, err2, err3)
}

// readFile parses the complete lines of path; complete is the length of
// its complete lines, nlines how many there are (parsed or not).
func readFile(path string) (lines []line, complete int64, nlines int, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, 0, nil
	}
	if err != nil {
		return nil, 0, 0, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	for {
		b, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return lines, complete, nlines, nil // b, if any, is torn
		}
		if err != nil {
			return lines, complete, nlines, err
		}
		complete += int64(len(b))
		nlines++
		var ln line
		if json.Unmarshal(b, &ln) == nil && len(ln.E) > 0 && ln.N < maxSeq {
			lines = append(lines, ln)
		}
	}
}

// flush writes l's queued entries.
func (l *Log) flush() {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.Lock()
	recs := l.pending
	l.pending, l.queued = nil, false
	removed := l.removed
	l.mu.Unlock()
	if removed || len(recs) == 0 {
		return
	}
	if err := l.write(recs); err != nil {
		l.s.log.Warn("writing log", "log", l.name, "entries", len(recs), "err", err)
	}
}

// write appends recs, rotating the files when the current one is full
// (l.wmu held).
func (l *Log) write(recs []record) error {
	var buf bytes.Buffer
	for _, r := range recs {
		e, err := json.Marshal(r.v)
		if err != nil {
			l.s.log.Warn("encoding log entry", "log", l.name, "err", err)
			continue
		}
		if l.lines >= l.s.opts.MaxLines || l.size+int64(buf.Len()) >= l.s.opts.MaxBytes {
			if err := l.appendFile(buf.Bytes()); err != nil {
				return err
			}
			buf.Reset()
			if err := l.rotate(); err != nil {
				return err
			}
		}
		buf.WriteString(`{"n":`)
		buf.WriteString(strconv.FormatUint(r.n, 10))
		buf.WriteString(`,"e":`)
		buf.Write(e)
		buf.WriteString("}\n")
		l.lines++
	}
	return l.appendFile(buf.Bytes())
}

func (l *Log) appendFile(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	f, err := os.OpenFile(l.s.path(l.name, false), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	n, err := f.Write(b)
	l.size += int64(n)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil && n < len(b) {
		// A partial line would glue onto the next append: cut it off.
		keep := bytes.LastIndexByte(b[:n], '\n') + 1
		l.size -= int64(n - keep)
		_ = os.Truncate(l.s.path(l.name, false), l.size)
	}
	return err
}

// rotate makes the current file the previous one.
func (l *Log) rotate() error {
	if err := os.Rename(l.s.path(l.name, false), l.s.path(l.name, true)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	l.lines, l.size = 0, 0
	return nil
}
