package sandbox

import (
	"context"
	"net/http"
	"net/netip"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egressproxy"
	"github.com/airlock-sandbox/airlock/internal/guest"
)

// The egress proxy's CA in sandboxes with network rules (issue 29): /init
// carries it (caBundle) at every create, fork, boot from disk and move,
// and a memory resume sends it again, since its image holds the CA of the
// daemon that paused it and the CA is made anew at each daemon start
// (internal/egressproxy/doc.go). Sandboxes without rules never get it.

// caBundle is the /init caBundle of a sandbox with rules: nil without
// rules or without a proxy CA on this node.
func (m *Manager) caBundle(rules egressproxy.Rules) *string {
	if len(rules) == 0 || m.cfg.CABundle == nil {
		return nil
	}
	pem := m.cfg.CABundle()
	if len(pem) == 0 {
		return nil
	}
	s := string(pem)
	return &s
}

// reinstallCA sends the node's CA to e's agent after a memory resume when
// x has rules. A failure is logged, not fatal: without the CA the
// sandbox's TLS to ruled domains fails, nothing goes out unprotected.
func (e *Live) reinstallCA(ctx context.Context, x extra) {
	e.mu.Lock()
	id, tok, ip := e.rec.ID, e.rec.AccessToken, e.guestIP
	e.mu.Unlock()
	e.m.sendCA(ctx, id, tok, ip, x.NetworkRules)
}

// sendCA installs the node's CA in the agent of sandbox id at ip (its
// access token tok) when rules are set; a failure is logged.
func (m *Manager) sendCA(ctx context.Context, id, tok string, ip netip.Addr, rules egressproxy.Rules) {
	ca := m.caBundle(rules)
	if ca == nil {
		return
	}
	body := guest.InitRequest{Timestamp: time.Now().UTC(), CABundle: ca}
	if tok != "" {
		body.AccessToken = &tok // a re-init without it would clear the agent's token
	}
	if err := m.agent.Init(ctx, ip.String(), body, tok); err != nil {
		m.log.Warn("installing the egress proxy CA", "sandbox", id, "err", err)
	}
}

// EgressRules returns the id and network rules of the sandbox at guest
// address ip, ok only when it has rules (the egress proxy's lookup of a
// steered connection's source).
func (m *Manager) EgressRules(ip netip.Addr) (string, egressproxy.Rules, bool) {
	id, x, ok := m.extraAt(ip) // egressproxy.go
	return id, x.NetworkRules, ok && len(x.NetworkRules) > 0
}

// checkRulesRuntime refuses network rules (501, naming the runtime) on a
// runtime whose guests' traffic the firewall cannot steer to the egress
// proxy, and (503) on a node whose egress proxy did not start: such rules
// would be kept and shown, and enforced nowhere. Both come before anything
// is set up.
func (m *Manager) checkRulesRuntime(rules egressproxy.Rules) error {
	if len(rules) == 0 {
		return nil
	}
	if !m.cfg.Runtime.Caps().EgressSteering {
		return userErrorf(http.StatusNotImplemented,
			"network rules (network.rules) are not supported by the %q runtime: its sandboxes' traffic cannot be steered to the egress proxy", m.cfg.Runtime.Name())
	}
	if m.cfg.EgressProxyDown != "" {
		m.log.Warn("network rules refused: the egress proxy is not running", "reason", m.cfg.EgressProxyDown)
		return userErrorf(http.StatusServiceUnavailable,
			"network rules (network.rules) cannot be applied: this node's egress proxy is not running (see the daemon log)")
	}
	return nil
}
