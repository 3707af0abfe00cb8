package daemon

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/airlock-sandbox/airlock/internal/egressproxy"
	"github.com/airlock-sandbox/airlock/internal/socksrelay"
)

// startEgressProxy starts the node's egress proxy (issue 29,
// internal/egressproxy): its CA, a listener whose port the firewall steers
// ruled connections to (network.Config.InterceptPort), and the accept
// loop. It returns the port, 0 when the proxy could not start: creates
// and network updates with network rules are then refused with 503
// (sandbox.Config.EgressProxyDown), never applied without it.
func (d *daemon) startEgressProxy() uint16 {
	port, err := d.startEgressProxyErr()
	if err != nil {
		d.egressProxyErr = err
		d.log.Error("egress proxy not started: creates with network rules will fail", "err", err)
		return 0
	}
	d.log.Info("egress proxy listening", "port", port)
	return port
}

func (d *daemon) startEgressProxyErr() (uint16, error) {
	roots := d.upstreamRoots // read at start (Run): a bad file refuses to start
	if roots == nil {
		roots = systemRoots()
	}
	ca, err := egressproxy.NewCA(d.cfg.NetPrefix)
	if err != nil {
		return 0, fmt.Errorf("making the egress proxy CA: %w", err)
	}
	// Every address: the firewall's input chain admits only connections it
	// DNATed from a sandbox with rules, to its own veth's host address.
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		return 0, fmt.Errorf("listening for the egress proxy: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.defer_(func() { cancel(); _ = l.Close() })
	p := &egressproxy.Proxy{CA: ca, RootCAs: roots, Log: d.log.With("component", "egressproxy"),
		Dial: socksDial, // through the sandbox's egressProxy when it has one (socksrelay.go)
		Resolve: func(ctx context.Context, name string) ([]byte, error) {
			if d.secrets == nil {
				return nil, errors.New("no secrets service")
			}
			return d.secrets.Resolve(ctx, name)
		}}
	go d.serveEgressProxy(ctx, l, p)
	d.egressCA = ca
	return uint16(l.Addr().(*net.TCPAddr).Port), nil
}

// serveEgressProxy hands each steered connection to p with the rules of
// the sandbox it comes from (by its source address) and the address it
// was opened to (SO_ORIGINAL_DST). Anything else is closed unread.
func (d *daemon) serveEgressProxy(ctx context.Context, l net.Listener, p *egressproxy.Proxy) {
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				d.log.Error("egress proxy stopped", "err", err)
			}
			return
		}
		go func() {
			t, ok := d.egressTarget(c)
			if !ok {
				_ = c.Close()
				return
			}
			cctx := d.withSocksUpstream(ctx, t.src)
			t.Route = socksRoute(cctx)
			p.HandleConn(cctx, c, t.Target)
		}()
	}
}

// steered is a steered connection's target and source.
type steered struct {
	egressproxy.Target
	src netip.Addr
}

func (d *daemon) egressTarget(c net.Conn) (steered, bool) {
	src, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil || d.mgr == nil {
		return steered{}, false
	}
	dst, err := egressproxy.OriginalDst(c)
	if err != nil || dst.String() == c.LocalAddr().String() {
		return steered{}, false // not steered
	}
	id, rules, ok := d.mgr.EgressRules(src.Addr().Unmap())
	if !ok {
		d.log.Warn("egress proxy: connection from no sandbox with rules", "from", src.Addr())
		return steered{}, false
	}
	return steered{egressproxy.Target{Sandbox: id, Addr: dst.String(), Rules: rules}, src.Addr().Unmap()}, true
}

// socksRoute names the route socksDial takes for ctx ("" direct): the
// proxy reuses an upstream connection only on the same route. The
// password enters it hashed.
func socksRoute(ctx context.Context) string {
	up, ok := ctx.Value(egressProxyCtx{}).(socksrelay.Upstream)
	if !ok {
		return ""
	}
	h := sha256.Sum256([]byte(up.Password))
	return "socks5\x00" + up.Address + "\x00" + up.Username + "\x00" + hex.EncodeToString(h[:])
}

// upstreamRoots returns the CAs the egress proxy trusts for upstream
// servers: the system roots and the certificates of
// --egress-proxy-upstream-ca. A file that cannot be read or holds no PEM
// certificate is an operator's error, returned naming the flag and the
// file (Run refuses to start: the proxy would otherwise fail every ruled
// connection to the operator's internal servers).
func (e Egress) upstreamRoots() (*x509.CertPool, error) {
	roots := systemRoots()
	f := e.ProxyUpstreamCA
	if f == "" {
		return roots, nil
	}
	pem, err := os.ReadFile(f)
	if err != nil {
		return nil, fmt.Errorf("invalid --egress-proxy-upstream-ca %q: %w", f, err)
	}
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("invalid --egress-proxy-upstream-ca %q: no PEM certificate in the file", f)
	}
	return roots, nil
}

// systemRoots is the host's CA pool (empty when it cannot be read).
func systemRoots() *x509.CertPool {
	roots, err := x509.SystemCertPool()
	if err != nil {
		return x509.NewCertPool()
	}
	return roots
}
