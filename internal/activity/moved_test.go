package activity

import (
	"testing"
	"time"
)

// A sandbox that arrives from another node numbers its entries past any id
// the other node gave, and keeps counting by one (also after a restart,
// from its file).
func TestArrivingNumbersPastTheOldNode(t *testing.T) {
	old := New(nil, Options{})
	for range 3 {
		old.Publish("sb", "process.start", nil)
	}
	lastOld := old.Query("sb", 0, nil, 0)[2].ID
	now := time.Date(2026, 11, 28, 23, 0, 0, 0, time.UTC)
	h := New(nil, Options{Now: func() time.Time { return now }})
	h.Arriving("sb")
	h.Publish("sb", "process.start", nil)
	h.Publish("sb", "process.exit", nil)
	got := h.Query("sb", lastOld, nil, 0)
	if len(got) != 2 || got[0].ID != uint64(now.UnixMicro()) || got[1].ID != got[0].ID+1 {
		t.Fatalf("entries after the old node's last id %d: %+v", lastOld, got)
	}
	if got[1].ID >= 1<<53 {
		t.Fatalf("id %d is past a JavaScript number's exact range", got[1].ID)
	}
	// Arriving again (moved back and forth) never goes backwards.
	h.Arriving("sb")
	h.Publish("sb", "process.start", nil)
	if e := h.Query("sb", got[1].ID, nil, 0); len(e) != 1 || e[0].ID != got[1].ID+1 {
		t.Fatalf("after a second arrival: %+v", e)
	}
}
