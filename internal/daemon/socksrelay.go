package daemon

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/egressproxy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/socksrelay"
)

// startSocksRelay starts the node's SOCKS relay (network.egressProxy,
// issue 29; internal/socksrelay): a listener whose port the firewall
// steers the TCP of sandboxes with an egressProxy to
// (network.Config.SocksPort), and its accept loop. It returns the port, 0
// when it could not start: egressProxy is then refused at create
// (network.Manager), never ignored.
func (d *daemon) startSocksRelay() uint16 {
	// Every address: the firewall's input chain admits only connections it
	// DNATed from a sandbox with an egressProxy, to its own veth's address.
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		d.log.Error("SOCKS relay not started: creates with network.egressProxy will fail", "err", err)
		return 0
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.defer_(func() { cancel(); _ = l.Close() })
	r := &socksrelay.Relay{Lookup: d.socksUpstream, OriginalDst: egressproxy.OriginalDst,
		Log: d.log.With("component", "socksrelay")}
	go func() {
		if err := r.Serve(ctx, l); err != nil {
			d.log.Error("SOCKS relay stopped", "err", err)
		}
	}()
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	d.log.Info("SOCKS relay listening", "port", port)
	return port
}

// socksUpstream is the egressProxy of the sandbox at guest address src,
// its password opened, with the names its DNS filter resolved.
func (d *daemon) socksUpstream(src netip.Addr) (socksrelay.Upstream, bool) {
	if d.mgr == nil {
		return socksrelay.Upstream{}, false
	}
	id, p, ok := d.mgr.EgressProxyFor(src)
	if !ok {
		return socksrelay.Upstream{}, false
	}
	up, err := d.upstreamOf(id, p)
	if err != nil {
		d.log.Error("SOCKS relay: the sandbox's egressProxy", "sandbox", id, "err", err)
		return socksrelay.Upstream{}, false
	}
	if nm := d.netMgr; nm != nil { // its approval hook, if any (network/relayhold_linux.go)
		up.Approve = func(ctx context.Context, dst netip.AddrPort) bool { return nm.ApproveRelayed(ctx, id, dst) }
	}
	return up, true
}

func (d *daemon) upstreamOf(id string, p *sandbox.EgressProxy) (socksrelay.Upstream, error) {
	if d.secretBox == nil {
		return socksrelay.Upstream{}, errors.New("no secrets key to open the proxy password")
	}
	pw, err := api.OpenProxyPassword(d.secretBox, p)
	if err != nil {
		return socksrelay.Upstream{}, err
	}
	up := socksrelay.Upstream{Sandbox: id, Address: p.Address, Username: p.Username, Password: pw}
	if !d.cfg.Egress.ProxyAllowPrivate {
		up.Refuse = socksrelay.Internal // the name may resolve elsewhere now
	}
	if nm := d.netMgr; nm != nil {
		up.Name = func(a netip.Addr) string { return nm.ProxyName(id, a) }
	}
	return up, nil
}

// egressProxyCtx is the context key of a steered connection's egressProxy
// for the interception proxy's upstream dial (socksDial).
type egressProxyCtx struct{}

// withSocksUpstream puts the egressProxy of the sandbox at guest address
// src into ctx, when it has one, for socksDial.
func (d *daemon) withSocksUpstream(ctx context.Context, src netip.Addr) context.Context {
	if d.mgr == nil {
		return ctx
	}
	id, p, ok := d.mgr.EgressProxyFor(src)
	if !ok {
		return ctx
	}
	up, err := d.upstreamOf(id, p)
	if err != nil {
		d.log.Error("egress proxy: the sandbox's egressProxy", "sandbox", id, "err", err)
		up = socksrelay.Upstream{Sandbox: id, Address: "invalid.invalid:1"} // fail closed, never direct
	}
	return context.WithValue(ctx, egressProxyCtx{}, up)
}

// socksDial is the interception proxy's upstream dial: through the
// sandbox's egressProxy when it has one (withSocksUpstream), else direct.
func socksDial(ctx context.Context, network, addr string) (net.Conn, error) {
	if up, ok := ctx.Value(egressProxyCtx{}).(socksrelay.Upstream); ok {
		return up.Dialer()(ctx, network, addr)
	}
	var dl net.Dialer
	return dl.DialContext(ctx, network, addr)
}
