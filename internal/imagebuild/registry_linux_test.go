//go:build linux

package imagebuild

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// secretBody is what an internal service answers; no error may carry it.
const secretBody = "internal-secret-body-7f3a"

// TestRegistryDeniedDestinations: FROM a loopback service, a registry that
// redirects or names a token realm on a denied address, all refused with
// a user error that never carries the service's body; an allowlisted
// address is reached.
func TestRegistryDeniedDestinations(t *testing.T) {
	hits := 0
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(secretBody))
	}))
	defer internal.Close()
	iu, _ := url.Parse(internal.URL)
	deny := network.Config{}.Denies
	b := New(nil, nil, nil, nil, WithPull(PullConfig{Denies: deny}))
	_, err := b.openImage(context.Background(), iu.Host+"/x/y:1")
	ue, ok := sandbox.AsUserError(err)
	if !ok || ue.Code != http.StatusBadRequest || !strings.Contains(ue.Msg, "refusing to connect") || strings.Contains(ue.Msg, secretBody) {
		t.Errorf("FROM a loopback service: %v", err)
	}
	if hits != 0 {
		t.Errorf("the loopback service was reached %d times", hits)
	}

	// Allowlisted: reached, and its body is not echoed.
	ap := netip.MustParseAddrPort(iu.Host)
	allowed := New(nil, nil, nil, nil, WithPull(PullConfig{Denies: deny, Allow: []AddrRule{{Prefix: netip.PrefixFrom(ap.Addr(), 32), Port: ap.Port()}}}))
	_, err = allowed.openImage(context.Background(), iu.Host+"/x/y:1")
	if err == nil || strings.Contains(err.Error(), secretBody) || !strings.Contains(err.Error(), "403") {
		t.Errorf("FROM an allowlisted service answering 403: %v", err)
	}
	if hits == 0 {
		t.Error("the allowlisted address was not reached")
	}

	// A registry (allowlisted) whose ping names a token realm on a denied
	// address, and one that redirects there.
	realm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="`+internal.URL+`/token",service="x"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer realm.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, internal.URL+"/v2/", http.StatusFound)
	}))
	defer redirect.Close()
	for name, srv := range map[string]*httptest.Server{"token realm": realm, "redirect": redirect} {
		u, _ := url.Parse(srv.URL)
		a := netip.MustParseAddrPort(u.Host)
		b := New(nil, nil, nil, nil, WithPull(PullConfig{Denies: deny, Allow: []AddrRule{{Prefix: netip.PrefixFrom(a.Addr(), 32), Port: a.Port()}}}))
		before := hits
		_, err := b.openImage(context.Background(), u.Host+"/x/y:1")
		if _, ok := sandbox.AsUserError(err); !ok || strings.Contains(err.Error(), secretBody) {
			t.Errorf("%s: %v", name, err)
		}
		if hits != before {
			t.Errorf("%s: the denied service was reached", name)
		}
	}
}

func TestRegistryRedirectCap(t *testing.T) {
	n := 0
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		http.Redirect(w, r, srv.URL+"/v2/?n="+r.URL.Query().Get("n")+"x", http.StatusFound)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	b := New(nil, nil, nil, nil, WithPull(PullConfig{Allow: []AddrRule{{Prefix: netip.MustParsePrefix("127.0.0.1/32")}}}))
	_, err := b.openImage(context.Background(), u.Host+"/x/y:1")
	if err == nil || n > 2*(maxRegistryRedirects+1) {
		t.Errorf("redirect loop: %d requests, err %v", n, err)
	}
}

func TestRegistryDialChecksEveryAddress(t *testing.T) {
	r := newRegistry(PullConfig{Denies: network.Config{}.Denies})
	r.hostAddrs = func() ([]net.Addr, error) {
		return []net.Addr{&net.IPNet{IP: net.ParseIP("203.0.113.9"), Mask: net.CIDRMask(24, 32)}}, nil
	}
	for _, addr := range []string{"127.0.0.1:443", "169.254.169.254:80", "10.0.0.1:443", "203.0.113.9:443", "[::1]:443", "[fe80::1]:443", "localhost:443"} {
		if _, err := r.dial(context.Background(), "tcp", addr); err == nil || !strings.Contains(err.Error(), "refusing to connect") {
			t.Errorf("dial %s: %v", addr, err)
		}
	}
}

func TestLocalImageDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	b := New(nil, nil, nil, nil, WithPull(PullConfig{ImageDir: dir}))
	for _, ref := range []string{"oci-layout:///etc", "oci-layout://" + dir + "/out", "docker-archive://" + dir + "/out/passwd", "oci-layout://" + dir + "/../x"} {
		_, err := b.openImage(context.Background(), ref)
		if ue, ok := sandbox.AsUserError(err); !ok || !strings.Contains(ue.Msg, "--image-dir") {
			t.Errorf("%s: %v", ref, err)
		}
	}
	none := New(nil, nil, nil, nil)
	if _, err := none.openImage(context.Background(), "oci-layout://"+dir); err == nil || !strings.Contains(err.Error(), "turned off") {
		t.Errorf("without --image-dir: %v", err)
	}
}

// TestImageBudget: an image whose layers unpack to more than the budget
// stops with a 413 naming the cap.
func TestImageBudget(t *testing.T) {
	img := testImage(t)
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	a := newLayerApplier(t.TempDir())
	budget := &imageBudget{left: 1024, ref: "big/image:1"}
	var last error
	for _, l := range ls {
		if last = applyImageLayer(a, l, budget); last != nil {
			break
		}
	}
	ue, ok := sandbox.AsUserError(last)
	if !ok || ue.Code != http.StatusRequestEntityTooLarge || !strings.Contains(ue.Msg, "big/image:1") || !strings.Contains(ue.Msg, "--max-image-mb") {
		t.Fatalf("over the budget: %v", last)
	}
}
