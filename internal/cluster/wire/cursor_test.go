package wire_test

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster/wire"
)

func FuzzDecodeCursor(f *testing.F) {
	f.Add("", int64(1700000000123456789), "iabc", true)
	f.Add("MjAyNi0xMS0yMlQwMzoyMDo0NS44NTZaX19pYWJj", int64(0), "i0", false)
	f.Add("!!", int64(-5), "", false)
	f.Fuzz(func(t *testing.T, tok string, nanos int64, id string, asc bool) {
		if c, err := wire.DecodeCursor(tok); err == nil {
			again, err := wire.DecodeCursor(wire.EncodeCursor(c))
			if err != nil || !again.StartedAt.Equal(c.StartedAt) || again.ID != c.ID || again.Asc != c.Asc {
				t.Fatalf("re-encoding %q: %+v vs %+v (%v)", tok, again, c, err)
			}
		}
		ts := time.Unix(0, nanos).UTC()
		if id == "" || strings.Trim(id, "abcdefghijklmnopqrstuvwxyz0123456789") != "" || ts.Year() < 1 || ts.Year() > 9999 {
			return
		}
		c := wire.Cursor{StartedAt: ts, ID: id, Asc: asc}
		got, err := wire.DecodeCursor(wire.EncodeCursor(c))
		if err != nil || !got.StartedAt.Equal(c.StartedAt) || got.ID != id || got.Asc != asc {
			t.Fatalf("round trip %+v → %+v (%v)", c, got, err)
		}
	})
}

func TestSnapshotCursor(t *testing.T) {
	t.Parallel()
	at := time.Unix(1764300000, 123456789)
	tok := wire.EncodeSnapshotCursor(at, "snap_1")
	ns, id, err := wire.DecodeSnapshotCursor(tok + "==") // padding is optional
	if err != nil || ns != at.UnixNano() || id != "snap_1" {
		t.Fatalf("DecodeSnapshotCursor(%q) = %d, %q, %v; want %d, snap_1", tok, ns, id, err, at.UnixNano())
	}
	for _, bad := range []string{"!!", wire.EncodeCursor(wire.Cursor{StartedAt: at, ID: "a"}), "MTIz", "MTIzXw"} { // "123", "123_"
		if _, _, err := wire.DecodeSnapshotCursor(bad); err == nil {
			t.Errorf("DecodeSnapshotCursor(%q) accepted a token it did not make", bad)
		}
	}
}
