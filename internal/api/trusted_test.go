package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/api"
)

// A cluster node serves without the API key only what the api tier marked
// as authenticated; an upload the api tier let through by its shape (it
// cannot check the node's signature) still needs a valid signature.
func TestTrustedOnlyForMarkedRequests(t *testing.T) {
	h := newHarness(t, api.Options{Trusted: func(r *http.Request) bool { return r.Header.Get("X-Marked") == "yes" }})
	send := func(method, path string, marked bool) int {
		t.Helper()
		req, err := http.NewRequest(method, h.srv.URL+path, strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		if marked {
			req.Header.Set("X-Marked", "yes")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := send("GET", "/sandboxes", true); got != http.StatusOK {
		t.Errorf("marked request without a key: %d, want 200", got)
	}
	if got := send("GET", "/sandboxes", false); got != http.StatusUnauthorized {
		t.Errorf("unmarked request without a key: %d, want 401", got)
	}
	if got := send("PUT", "/airlock/v1/template-files/abc?expires=99999999999&signature=forged", false); got != http.StatusUnauthorized {
		t.Errorf("upload with a forged signature: %d, want 401", got)
	}
}
