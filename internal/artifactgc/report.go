package artifactgc

import (
	"log/slog"
	"time"
)

// Count is what a pass did with the objects of one kind.
type Count struct {
	// Kept: left in place (referenced, younger than Grace, or trees held
	// back by an unreadable manifest).
	Kept int
	// Deleted and the bytes they held.
	Deleted    int
	FreedBytes int64
	// Failed: deletes that failed (logged; the object stays for the next
	// pass).
	Failed int
}

func (c Count) zero() bool { return c == Count{} }

// Report is the outcome of a pass.
type Report struct {
	// Skipped: another instance held the lock; nothing was looked at.
	Skipped bool
	// Templates (templates/<hash>), Paused (paused/<id>), Snapshots
	// (snapshots/<id>), Checks (check-*), Trees (trees/sha256/…) and Blobs
	// (blobs/sha256/…).
	Templates, Paused, Snapshots, Checks, Trees, Blobs Count
	// Unknown counts objects under keys of no known kind (left alone).
	Unknown int
	// TreesHeld says why no tree or blob was deleted ("" when they were
	// collected): a manifest that could not be read, or an unknown key.
	TreesHeld string
	Duration  time.Duration
}

// kinds lists the counts with their names, in report order.
func (r *Report) kinds() []struct {
	name string
	c    *Count
} {
	return []struct {
		name string
		c    *Count
	}{
		{"templates", &r.Templates}, {"paused", &r.Paused}, {"snapshots", &r.Snapshots},
		{"checks", &r.Checks}, {"trees", &r.Trees}, {"blobs", &r.Blobs},
	}
}

// Deleted is the number of objects the pass deleted.
func (r Report) Deleted() int {
	n := 0
	for _, k := range r.kinds() {
		n += k.c.Deleted
	}
	return n
}

// Freed is the number of bytes the pass deleted.
func (r Report) Freed() int64 {
	var n int64
	for _, k := range r.kinds() {
		n += k.c.FreedBytes
	}
	return n
}

// LogValue shows the kinds that had objects, as groups (kept, deleted,
// freed_bytes, failed), then the rest.
func (r Report) LogValue() slog.Value {
	var attrs []slog.Attr
	for _, k := range r.kinds() {
		if k.c.zero() {
			continue
		}
		attrs = append(attrs, slog.Group(k.name, "kept", k.c.Kept, "deleted", k.c.Deleted,
			"freed_bytes", k.c.FreedBytes, "failed", k.c.Failed))
	}
	if r.Unknown > 0 {
		attrs = append(attrs, slog.Int("unknown", r.Unknown))
	}
	if r.TreesHeld != "" {
		attrs = append(attrs, slog.String("trees_held", r.TreesHeld))
	}
	attrs = append(attrs, slog.Duration("duration", r.Duration.Round(time.Millisecond)))
	return slog.GroupValue(attrs...)
}
