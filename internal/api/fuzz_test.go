package api_test

import (
	"maps"
	"testing"

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
