package sandbox

import (
	"net/netip"

	"github.com/airlock-sandbox/airlock/internal/egressproxy"
	"github.com/airlock-sandbox/airlock/internal/network"
)

// EgressProxy is a sandbox's network.egressProxy (E2B's SOCKS5 upstream,
// issue 29; internal/socksrelay), as kept in its record: the password
// sealed (secretbox, the daemon's secrets key, as /secrets values are),
// never in the clear at rest, never in an API answer.
type EgressProxy struct {
	// Address is host:port of the SOCKS5 server.
	Address  string `json:"address"`
	Username string `json:"username,omitempty"`
	// PasswordSealed is the RFC 1929 password sealed by the API
	// (api.sealProxyPassword), "" without one.
	PasswordSealed string `json:"passwordSealed,omitempty"`
}

// Clone returns a copy of p (nil stays nil).
func (p *EgressProxy) Clone() *EgressProxy {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// netOptions is the network policy (network.Options) of a sandbox.
func netOptions(allowInternet bool, eg network.Egress, rules egressproxy.Rules, proxy *EgressProxy) network.Options {
	return network.Options{AllowInternet: allowInternet, Egress: eg, Intercept: rules.Domains(), EgressProxy: proxy != nil}
}

// EgressProxyFor returns the id and egressProxy of the live sandbox at
// guest address ip, ok only when it has one (the SOCKS relay's lookup of a
// steered connection's source).
func (m *Manager) EgressProxyFor(ip netip.Addr) (string, *EgressProxy, bool) {
	id, x, ok := m.extraAt(ip)
	return id, x.EgressProxy, ok && x.EgressProxy != nil
}

// extraAt returns the id and record extras of the live sandbox at guest
// address ip (the node's proxies' lookup of a steered connection's
// source).
func (m *Manager) extraAt(ip netip.Addr) (string, extra, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, e := range m.sandboxes {
		e.mu.Lock()
		match, ext := e.guestIP == ip && !e.gone, e.rec.Extra
		e.mu.Unlock()
		if match {
			return id, decodeExtra(ext), true
		}
	}
	return "", extra{}, false
}
