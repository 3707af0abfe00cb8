package proxy_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/proxy"
)

func TestUploadGuard(t *testing.T) {
	// envd's port on a loopback address of our own: the guard only applies
	// to envd's /files.
	startUpstream(t, "envd", "127.77.5.1:"+strconv.Itoa(proxy.EnvdPort), nil)
	var full atomic.Bool
	full.Store(true)
	h := proxy.New(fakeResolver{"iabc": {ID: "iabc", Addr: netip.MustParseAddr("127.77.5.1")}}, apiStub, proxy.Options{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		UploadGuard: func() error {
			if full.Load() {
				return errors.New("the host's disk is full: 0 KiB free")
			}
			return nil
		},
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	hdr := map[string]string{"E2b-Sandbox-Id": "iabc"}

	r := send(t, srv, "POST", "/files?path=/tmp/x", "", hdr)
	if r.status != 507 || r.echo["code"] != float64(507) || r.echo["sandboxId"] != "iabc" ||
		r.echo["message"] != "upload refused: the host's disk is full: 0 KiB free" {
		t.Fatalf("upload on a full disk: %d %s", r.status, r.body)
	}
	// Reads and other calls still pass while the disk is full.
	for _, c := range []struct{ method, path string }{{"GET", "/files?path=/tmp/x"}, {"POST", "/process.Process/Start"}} {
		if r := send(t, srv, c.method, c.path, "", hdr); r.status != 200 || r.echo["upstream"] != "envd" {
			t.Fatalf("%s %s on a full disk: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	// Space is back: uploads pass again.
	full.Store(false)
	if r := send(t, srv, "POST", "/files?path=/tmp/x", "", hdr); r.status != 200 || r.echo["upstream"] != "envd" {
		t.Fatalf("upload after space returned: %d %s", r.status, r.body)
	}
}
