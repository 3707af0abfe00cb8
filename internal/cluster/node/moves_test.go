package node

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A node without an artifact store refuses an adoption with a 501 before
// it looks for the sandbox (sandbox.Manager.Adopt did, on the node's
// behalf, before the moves came here); a request without a node to adopt
// from is a 400 first.
func TestAdoptWithoutArtifactStore(t *testing.T) {
	n := New(Config{ID: "n7"})
	for _, c := range []struct {
		body string
		want int
	}{
		{`{}`, http.StatusBadRequest},
		{`{"from":"n1"}`, http.StatusNotImplemented},
		{`{"from":"n1","resume":true}`, http.StatusNotImplemented},
	} {
		w := httptest.NewRecorder()
		n.serveAdopt(w, httptest.NewRequest(http.MethodPost, "/airlock/v1/internal/sandboxes/sb1/adopt", strings.NewReader(c.body)), "sb1")
		if w.Code != c.want {
			t.Errorf("%s: %d %s, want %d", c.body, w.Code, w.Body, c.want)
		}
	}
}
