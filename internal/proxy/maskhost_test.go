package proxy_test

import (
	"net/netip"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/proxy"
)

// TestMaskRequestHost: a sandbox created with network.maskRequestHost sees
// that Host, "${PORT}" replaced by the port, on every request the proxy
// forwards (issue 26 item 6); without it the Host stays the guest address.
func TestMaskRequestHost(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, "a", "127.0.0.1:0", nil)
	srv := newProxy(t, fakeResolver{
		"imask":  {ID: "imask", Addr: netip.MustParseAddr("127.0.0.1"), MaskRequestHost: "custom-host.example.com:${PORT}"},
		"iplain": {ID: "iplain", Addr: netip.MustParseAddr("127.0.0.1"), MaskRequestHost: "plain.example.com"},
		"inone":  {ID: "inone", Addr: netip.MustParseAddr("127.0.0.1")},
	})
	for id, want := range map[string]string{
		"imask":  "custom-host.example.com:" + up.port,
		"iplain": "plain.example.com",
		"inone":  "127.0.0.1:" + up.port,
	} {
		// By Host and by header routing alike.
		if r := send(t, srv, "GET", "/x", up.port+"-"+id+".sbx.test", nil); r.status != 200 || r.echo["host"] != want {
			t.Errorf("%s by host: %d, Host %v, want %q", id, r.status, r.echo["host"], want)
		}
		if r := send(t, srv, "GET", "/x", "", map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": up.port}); r.status != 200 || r.echo["host"] != want {
			t.Errorf("%s by header: %d, Host %v, want %q", id, r.status, r.echo["host"], want)
		}
	}
}

func TestMaskedHost(t *testing.T) {
	for _, c := range []struct {
		mask string
		port int
		want string
	}{
		{"", 8080, ""},
		{"a.example.com", 8080, "a.example.com"},
		{"a.example.com:${PORT}", 3000, "a.example.com:3000"},
		{"localhost:${PORT}", 49983, "localhost:49983"},
	} {
		if got := proxy.MaskedHost(c.mask, c.port); got != c.want {
			t.Errorf("MaskedHost(%q, %d) = %q, want %q", c.mask, c.port, got, c.want)
		}
	}
}
