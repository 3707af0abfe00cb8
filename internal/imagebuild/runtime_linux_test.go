//go:build linux

package imagebuild

import (
	"context"
	"net/http"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// A daemon whose runtime offers no LayerSource refuses builds with a clear
// 501 instead of failing half-way (gVisor and microVM both offer one).
func TestBuildNeedsLayerReader(t *testing.T) {
	b := New(nil, nil, nil, nil)
	_, err := b.Build(context.Background(), Request{Dockerfile: []byte("FROM base\nRUN true\n")}, nil)
	ue, ok := sandbox.AsUserError(err)
	if !ok || ue.Code != http.StatusNotImplemented {
		t.Fatalf("Build = %v, want a 501 user error", err)
	}
}
