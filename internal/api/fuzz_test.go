package api_test

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/api"
)

func FuzzDecodeMetadataFilter(f *testing.F) {
	f.Add("user id", "a&b=c/d+e ü", "")
	f.Add("k", "", "a%2520b%3Dc")
	f.Add("%", "=", "%zz&=x")
	f.Fuzz(func(t *testing.T, k, v, raw string) {
		_, _ = api.DecodeMetadataFilter(raw) // must not panic
		if k == "" {
			return
		}
		want := map[string]string{k: v}
		for name, enc := range map[string]string{"js": jsMetadata(want), "python": pyMetadata(want)} {
			got, err := api.DecodeMetadataFilter(enc)
			if err != nil {
				t.Fatalf("%s form %q: %v", name, enc, err)
			}
			if !maps.Equal(got, want) {
				t.Fatalf("%s form %q decoded to %q, want %q", name, enc, got, want)
			}
		}
	})
}

func FuzzDecodeCursor(f *testing.F) {
	f.Add("", int64(1700000000123456789), "iabc", true)
	f.Add("MjAyNi0xMS0yMlQwMzoyMDo0NS44NTZaX19pYWJj", int64(0), "i0", false)
	f.Add("!!", int64(-5), "", false)
	f.Fuzz(func(t *testing.T, tok string, nanos int64, id string, asc bool) {
		if c, err := api.DecodeCursor(tok); err == nil {
			again, err := api.DecodeCursor(api.EncodeCursor(c))
			if err != nil || !again.StartedAt.Equal(c.StartedAt) || again.ID != c.ID || again.Asc != c.Asc {
				t.Fatalf("re-encoding %q: %+v vs %+v (%v)", tok, again, c, err)
			}
		}
		ts := time.Unix(0, nanos).UTC()
		if id == "" || strings.Trim(id, "abcdefghijklmnopqrstuvwxyz0123456789") != "" || ts.Year() < 1 || ts.Year() > 9999 {
			return
		}
		c := api.Cursor{StartedAt: ts, ID: id, Asc: asc}
		got, err := api.DecodeCursor(api.EncodeCursor(c))
		if err != nil || !got.StartedAt.Equal(c.StartedAt) || got.ID != id || got.Asc != asc {
			t.Fatalf("round trip %+v → %+v (%v)", c, got, err)
		}
	})
}
