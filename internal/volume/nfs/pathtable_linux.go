//go:build linux

package nfs

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// idLen is the length of a path-table handle's id.
const idLen = 16

type handleID [idLen]byte

// pathTable gives file handles to an export whose file system has none of
// its own (a FUSE mount such as a bucket volume's s3fs): an opaque random id
// for each path, relative to the export's root, that the guest has been
// given a handle for. The path is only ever used through the export's
// os.Root, so a handle names nothing outside the export whatever the table
// holds. Renames and removes through the server update it. When file is set
// the table is kept there as an append-only log ("+<id> <quoted path>",
// "-<id>"), compacted when loaded, so a server started later (a resumed VM,
// a fork child given a copy, a restarted daemon) answers the handles the
// guest's NFS client already holds.
type pathTable struct {
	file string

	mu     sync.Mutex
	byID   map[handleID]string
	byPath map[string]handleID
	log    *os.File
}

// openPathTable loads file (if it exists; "" keeps the table in memory
// only), rewrites it compacted and opens it for appending.
func openPathTable(file string) (*pathTable, error) {
	t := &pathTable{file: file, byID: map[handleID]string{}, byPath: map[string]handleID{}}
	if file == "" {
		return t, nil
	}
	if err := t.load(); err != nil {
		return nil, err
	}
	tmp := file + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("nfs: handle table: %w", err)
	}
	w := bufio.NewWriter(f)
	for id, p := range t.byID {
		w.WriteString(addLine(id, p))
	}
	if err := errors.Join(w.Flush(), f.Sync(), f.Close()); err != nil {
		return nil, fmt.Errorf("nfs: handle table: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return nil, fmt.Errorf("nfs: handle table: %w", err)
	}
	t.log, err = os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, fmt.Errorf("nfs: handle table: %w", err)
	}
	return t, nil
}

func addLine(id handleID, p string) string {
	return "+" + hex.EncodeToString(id[:]) + " " + strconv.Quote(p) + "\n"
}

// load replays the log. A line that does not parse (a torn last write)
// ends the replay; a path that is not local is dropped.
func (t *pathTable) load() error {
	f, err := os.Open(t.file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("nfs: handle table: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 1+2*idLen {
			break
		}
		var id handleID
		if _, err := hex.Decode(id[:], []byte(line[1:1+2*idLen])); err != nil {
			break
		}
		switch line[0] {
		case '+':
			p, err := strconv.Unquote(strings.TrimPrefix(line[1+2*idLen:], " "))
			if err != nil {
				return nil
			}
			if !localPath(p) {
				continue
			}
			t.setLocked(id, p)
		case '-':
			t.dropLocked(id)
		default:
			return nil
		}
	}
	return nil
}

// localPath says whether p is a table key: "." or a clean relative path
// that does not leave its root.
func localPath(p string) bool {
	return p == "." || (filepath.IsLocal(p) && path.Clean(p) == p)
}

// key is the table key of a billy path.
func key(p string) string {
	p = path.Clean("/" + p)
	if p == "/" {
		return "."
	}
	return p[1:]
}

func (t *pathTable) setLocked(id handleID, p string) {
	if old, ok := t.byID[id]; ok {
		delete(t.byPath, old)
	}
	if oid, ok := t.byPath[p]; ok {
		delete(t.byID, oid)
	}
	t.byID[id] = p
	t.byPath[p] = id
}

func (t *pathTable) dropLocked(id handleID) {
	if p, ok := t.byID[id]; ok {
		delete(t.byPath, p)
		delete(t.byID, id)
	}
}

func (t *pathTable) appendLocked(s string) {
	if t.log != nil {
		// A lost line costs a stale handle after a restart, never access.
		_, _ = t.log.WriteString(s)
	}
}

// id returns p's id, giving it one if it has none.
func (t *pathTable) id(p string) (handleID, error) {
	p = key(p)
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.byPath[p]; ok {
		return id, nil
	}
	var id handleID
	if _, err := rand.Read(id[:]); err != nil {
		return id, err
	}
	t.setLocked(id, p)
	t.appendLocked(addLine(id, p))
	return id, nil
}

// path is id's path.
func (t *pathTable) path(id handleID) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.byID[id]
	return p, ok
}

// renamed moves the ids of from and of everything below it to to; what to
// held before is gone.
func (t *pathTable) renamed(from, to string) {
	from, to = key(from), key(to)
	if from == to || from == "." {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	if id, ok := t.byPath[to]; ok {
		t.dropLocked(id)
		b.WriteString("-" + hex.EncodeToString(id[:]) + "\n")
	}
	moved := map[handleID]string{}
	for p, id := range t.byPath {
		if p == from || strings.HasPrefix(p, from+"/") {
			moved[id] = to + strings.TrimPrefix(p, from)
		}
	}
	for id, np := range moved {
		t.setLocked(id, np)
		b.WriteString(addLine(id, np))
	}
	t.appendLocked(b.String())
}

// removed forgets p's id.
func (t *pathTable) removed(p string) {
	p = key(p)
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.byPath[p]; ok {
		t.dropLocked(id)
		t.appendLocked("-" + hex.EncodeToString(id[:]) + "\n")
	}
}

func (t *pathTable) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.log == nil {
		return nil
	}
	err := t.log.Close()
	t.log = nil
	return err
}

// stableInfo is a FileInfo whose inode number (the NFS fileid) is the
// path table's id of its path.
type stableInfo struct {
	os.FileInfo
	sys *syscall.Stat_t
}

func (s stableInfo) Sys() any { return s.sys }

// stable gives fi, the attributes of name, a fileid that lasts as long as
// the path's handle when the export has a path table. The guest's NFS
// client takes a changed fileid behind a handle for a stale file, and a
// FUSE file system's inode numbers (s3fs's are node ids) change once the
// host evicts the inode.
func (r *rootFS) stable(name string, fi os.FileInfo) os.FileInfo {
	if r.table == nil || fi == nil {
		return fi
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fi
	}
	id, err := r.table.id(name)
	if err != nil {
		return fi
	}
	c := *st
	c.Ino = binary.LittleEndian.Uint64(id[:8])
	return stableInfo{FileInfo: fi, sys: &c}
}
