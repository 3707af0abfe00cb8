package activity

import (
	"github.com/airlock-sandbox/airlock/internal/filefeed"
)

// File entry limits (internal/filefeed; the agent applies the same ones
// to the feed's watch).
const (
	// WriteWindow coalesces writes: one file.write per path per window.
	WriteWindow = filefeed.Window
	// FileRate is how many file entries a sandbox may add per second;
	// beyond it they are counted, and one "file.dropped" entry with the
	// count comes before the next one that is kept.
	FileRate = filefeed.Rate
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

var fileKinds = map[string]filefeed.Kind{
	FileCreate: filefeed.Create,
	FileWrite:  filefeed.Write,
	FileRename: filefeed.Rename,
	FileDelete: filefeed.Delete,
}

// File adds a file entry (typ one of the File* types) for path in sandbox
// id, coalescing writes (WriteWindow) and capping the rate (FileRate).
func (h *Hub) File(id, typ, path string) {
	h.file(id, typ, path, false, 0)
}

// file adds a file entry. coalesced: the agent coalesced writes already
// (only the sandbox-wide rate cap applies here); dropped: entries the
// agent's own cap left out before this one.
func (h *Hub) file(id, typ, path string, coalesced bool, dropped int) {
	if h == nil {
		return
	}
	now := h.opts.Now()
	f := h.feed(id)
	f.mu.Lock()
	f.files.NoCoalesce = coalesced
	keep, dropped := f.files.Add(now, fileKinds[typ], path, dropped)
	f.mu.Unlock()
	if !keep {
		return
	}
	if dropped > 0 {
		h.PublishAt(id, now, FileDropped, map[string]any{"count": dropped})
	}
	h.PublishAt(id, now, typ, map[string]any{"path": path})
}
