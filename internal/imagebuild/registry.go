package imagebuild

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// maxRegistryRedirects caps the redirects one registry request follows
// (go-containerregistry's client would follow ten).
const maxRegistryRedirects = 3

// registryClient is the HTTP side of FROM: every connection goes through dial,
// which refuses denied destinations (PullConfig.Denies, the host's own
// addresses) unless allowlisted.
type registryClient struct {
	cfg       PullConfig
	dialer    net.Dialer
	transport http.RoundTripper
	// hostAddrs lists the host's own addresses (net.InterfaceAddrs).
	hostAddrs func() ([]net.Addr, error)
}

func newRegistry(cfg PullConfig) *registryClient {
	r := &registryClient{cfg: cfg, dialer: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}, hostAddrs: net.InterfaceAddrs}
	base, ok := remote.DefaultTransport.(*http.Transport)
	if !ok {
		base = http.DefaultTransport.(*http.Transport)
	}
	t := base.Clone()
	t.DialContext = r.dial
	t.DialTLSContext = nil
	r.transport = guardedTransport{next: t, r: r}
	return r
}

// deniedDialError is a connection the registry client refused to open.
type deniedDialError struct {
	host string
	addr netip.Addr
	why  string
}

func (e *deniedDialError) Error() string {
	h := e.host
	if h != e.addr.String() {
		h += " (" + e.addr.String() + ")"
	}
	return fmt.Sprintf("refusing to connect to %s: %s; an operator can allow a registry there with --registry-allow", h, e.why)
}

// denied reports why a (port) must not be dialed, or "".
func (r *registryClient) denied(a netip.Addr, port uint16) string {
	a = a.Unmap()
	for _, rule := range r.cfg.Allow {
		if rule.allows(a, port) {
			return ""
		}
	}
	if r.cfg.Denies != nil {
		if p, ok := r.cfg.Denies(a); ok {
			return fmt.Sprintf("%s is in %s, which template builds may not reach", a, p)
		}
	}
	if a.IsLoopback() || a.IsUnspecified() || a.IsLinkLocalUnicast() {
		return fmt.Sprintf("%s is a loopback or link-local address", a)
	}
	if addrs, err := r.hostAddrs(); err == nil {
		for _, ha := range addrs {
			if n, ok := ha.(*net.IPNet); ok {
				if h, ok := netip.AddrFromSlice(n.IP); ok && h.Unmap() == a {
					return fmt.Sprintf("%s is an address of this host", a)
				}
			}
		}
	}
	return ""
}

// dial resolves addr, checks every address it resolves to and connects to
// a checked one (never resolving again: a DNS answer that changes between
// the check and the connection cannot redirect it).
func (r *registryClient) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("bad port in %q", addr)
	}
	var ips []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{a}
	} else if ips, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, err
	}
	var errs []error
	for _, ip := range ips {
		ip = ip.Unmap()
		if why := r.denied(ip, uint16(port)); why != "" {
			errs = append(errs, &deniedDialError{host: host, addr: ip, why: why})
			continue
		}
		c, err := r.dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(ip, uint16(port)).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("%s: no address", host)
	}
	return nil, errs[0]
}

// guardedTransport caps redirects and refuses plain HTTP except to
// loopback (which dial refuses in turn unless allowlisted).
type guardedTransport struct {
	next http.RoundTripper
	r    *registryClient
}

func (t guardedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	n := 0
	for prev := req.Response; prev != nil; prev = prev.Request.Response {
		if n++; n > maxRegistryRedirects {
			return nil, fmt.Errorf("refusing more than %d redirects from the registry", maxRegistryRedirects)
		}
	}
	if req.URL.Scheme == "http" && !isLoopbackHost(req.URL.Hostname()) {
		return nil, fmt.Errorf("refusing insecure (http) registry %s: only loopback registries may use plain HTTP", req.URL.Host)
	}
	return t.next.RoundTrip(req)
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.Unmap().IsLoopback()
}

// pullErr is a user error for a failed registry or image read that never
// carries a response body (go-containerregistry's transport.Error holds
// the raw body of an answer it cannot parse, and the diagnostic messages
// of one it can): the status, the registry's error codes and a short
// reason.
func pullErr(format string, args []any, err error) error {
	what := fmt.Sprintf(format, args...)
	var te *transport.Error
	if errors.As(err, &te) {
		msg := fmt.Sprintf("%s: the registry answered %d %s", what, te.StatusCode, http.StatusText(te.StatusCode))
		var codes []string
		for _, d := range te.Errors {
			if knownErrorCodes[d.Code] {
				codes = append(codes, string(d.Code))
			}
		}
		if len(codes) > 0 {
			msg += " (" + strings.Join(codes, ", ") + ")"
		}
		return userErr("%s", msg)
	}
	return userErr("%s: %s", what, clip(err.Error(), 300))
}

var knownErrorCodes = map[transport.ErrorCode]bool{
	transport.BlobUnknownErrorCode: true, transport.BlobUploadInvalidErrorCode: true, transport.BlobUploadUnknownErrorCode: true,
	transport.DigestInvalidErrorCode: true, transport.ManifestBlobUnknownErrorCode: true, transport.ManifestInvalidErrorCode: true,
	transport.ManifestUnknownErrorCode: true, transport.ManifestUnverifiedErrorCode: true, transport.NameInvalidErrorCode: true,
	transport.NameUnknownErrorCode: true, transport.SizeInvalidErrorCode: true, transport.TagInvalidErrorCode: true,
	transport.UnauthorizedErrorCode: true, transport.DeniedErrorCode: true, transport.UnsupportedErrorCode: true,
	transport.TooManyRequestsErrorCode: true, transport.UnknownErrorCode: true, transport.UnavailableErrorCode: true,
}

// clip shortens s to n bytes on one line.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
