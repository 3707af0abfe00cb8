package egressproxy

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A sandbox's client that starts its TLS handshake 11 s after connecting
// (an emulated microVM's curl under load took that long) is still served
// with the default HandshakeTimeout: with 10 s the proxy dropped it and
// the sandbox saw an empty reply (issue 29, the microVM attack tests).
func TestSlowClientHandshake(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, "api.test")
	h := newHarness(t, ghRule, up.srv.Listener.Addr().String(), up, up.pool())
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "tcp", h.ln.Addr().String())
			if err == nil {
				time.Sleep(11 * time.Second)
			}
			return conn, err
		},
		TLSClientConfig: &tls.Config{RootCAs: h.sandboxRoots()},
	}}
	resp, err := c.Get("https://api.test/headers")
	if err != nil {
		t.Fatalf("GET after a slow start: %v (proxy log: %s)", err, h.logs)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "Bearer "+secretValue) {
		t.Fatalf("upstream saw %d %s", resp.StatusCode, b)
	}
}
