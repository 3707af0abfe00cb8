package activity

import (
	"time"
)

// File entry limits.
const (
	// WriteWindow coalesces writes: one file.write per path per window.
	WriteWindow = time.Second
	// FileRate is how many file entries a sandbox may add per second;
	// beyond it they are counted, and one "file.dropped" entry with the
	// count comes before the next one that is kept.
	FileRate = 200
	// maxWriteTimes bounds the per-path write times a feed remembers.
	maxWriteTimes = 4096
)

// File entry types by the agent's event names.
const (
	FileCreate = "file.create"
	FileWrite  = "file.write"
	FileRename = "file.rename"
	FileDelete = "file.delete"
	// FileDropped counts file entries the rate cap left out.
	FileDropped = "file.dropped"
)

// File adds a file entry (typ one of the File* types) for path in sandbox
// id, coalescing writes (WriteWindow) and capping the rate (FileRate).
func (h *Hub) File(id, typ, path string) {
	if h == nil {
		return
	}
	now := h.opts.Now()
	f := h.feed(id)
	f.mu.Lock()
	if typ == FileWrite {
		if t, ok := f.lastWrite[path]; ok && now.Sub(t) < WriteWindow {
			f.mu.Unlock()
			return
		}
		if f.lastWrite == nil || len(f.lastWrite) >= maxWriteTimes {
			f.lastWrite = map[string]time.Time{}
		}
		f.lastWrite[path] = now
	} else if typ == FileDelete || typ == FileRename {
		delete(f.lastWrite, path)
	}
	if now.Sub(f.fileWindow) >= time.Second {
		f.fileWindow, f.fileCount = now, 0
	}
	if f.fileCount >= FileRate {
		f.fileDropped++
		f.mu.Unlock()
		return
	}
	f.fileCount++
	dropped := f.fileDropped
	f.fileDropped = 0
	f.mu.Unlock()
	if dropped > 0 {
		h.PublishAt(id, now, FileDropped, map[string]any{"count": dropped})
	}
	h.PublishAt(id, now, typ, map[string]any{"path": path})
}
