package api_test

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/api"
)

// TestCreateMaskRequestHost: network.maskRequestHost is accepted (it was a
// 501), validated as E2B does (400), kept on the sandbox and shown in its
// info (issue 26 item 6).
func TestCreateMaskRequestHost(t *testing.T) {
	t.Parallel()
	h := newHarness(t, api.Options{})
	st, _, body := h.do(t, "POST", "/v2/sandboxes", `{"templateID":"base","network":{"maskRequestHost":"custom-host.example.com:${PORT}"}}`)
	if st != 201 {
		t.Fatalf("create = %d %s", st, body)
	}
	id := decode[map[string]any](t, body)["sandboxID"].(string)
	sb, err := viewOf(h.env.Manager, id)
	if err != nil {
		t.Fatal(err)
	}
	if sb.MaskRequestHost != "custom-host.example.com:${PORT}" {
		t.Fatalf("sandbox MaskRequestHost = %q", sb.MaskRequestHost)
	}
	st, _, body = h.do(t, "GET", "/sandboxes/"+id, "")
	info := decode[map[string]any](t, body)
	if n, _ := info["network"].(map[string]any); st != 200 || n["maskRequestHost"] != "custom-host.example.com:${PORT}" {
		t.Fatalf("info: %d %s", st, body)
	}
	st, _, body = h.do(t, "POST", "/v2/sandboxes", `{"network":{"maskRequestHost":"${PORT}-sandbox.example.com"}}`)
	assertError(t, st, body, 400, "mask request host is not valid")
	st, _, body = h.do(t, "POST", "/v2/sandboxes", `{"network":{"maskRequestHost":"bücher.de"}}`)
	assertError(t, st, body, 400, "is not ASCII")
}
