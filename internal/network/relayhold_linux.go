//go:build linux

package network

import (
	"context"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/airlock-sandbox/airlock/internal/approval"
)

// The approval hold of a sandbox with an egressProxy (Egress.Hold and
// Egress.Relayed). Its TCP is DNATed in prerouting (socks_pre, which jumps
// to the sandbox's egress chain through socks_out) to the SOCKS relay, so
// the forward chain's NFQUEUE rule never sees it, and a `reject` cannot be
// used from prerouting anyway. Its egress chain keeps allowOut (accept)
// and its specific denyOut entries (drop), then accepts the rest of its
// TCP, which the relay holds in user space: before its SOCKS CONNECT it
// calls Manager.ApproveRelayed, which asks the same approval.Broker as
// the queue does (a remembered answer is the broker's, so it skips the
// hook the same way), records the decision in the egress audit log and
// the activity feed, and on deny or timeout the relay resets the
// sandbox's connection. The sandbox sees its connect succeed at once (the
// relay accepted it) and its first read wait for the hook; a deny is a
// reset, not a refused connect.

// relayHold is what ApproveRelayed needs of a relayed, held sandbox.
type relayHold struct {
	ifname string
	allow  []netip.Prefix
}

// addRelayHold adds, in batch c, the rules of a relayed, held sandbox's
// egress chain after allowOut and the specific denyOut entries: its TCP
// goes on to the relay, the catch-all denies apply to the rest.
func (f *firewall) addRelayHold(c *nftables.Conn, ch *nftables.Chain, e Egress) {
	c.AddRule(&nftables.Rule{Table: f.table, Chain: ch, Exprs: append(isTCP(), &expr.Verdict{Kind: expr.VerdictAccept})})
	for _, r := range f.egressDenyRules(catchAll(e.Deny)) {
		c.AddRule(&nftables.Rule{Table: f.table, Chain: ch, Exprs: r})
	}
}

// noteRelayHold records (or, when e is not a relayed hold, forgets) that
// sandbox id's relayed TCP is held for its hook.
func (m *Manager) noteRelayHold(id, ifname string, e Egress) {
	m.ifMu.Lock()
	defer m.ifMu.Unlock()
	if !e.Hold || !e.Relayed {
		delete(m.relayHold, id)
		return
	}
	m.relayHold[id] = relayHold{ifname: ifname, allow: append([]netip.Prefix(nil), e.Allow...)}
}

// ApproveRelayed reports whether the SOCKS relay may open dst for sandbox
// id. Without a hold, or for a destination its allowOut (an address, or
// one its allowed domains resolved to) already opens, it answers true at
// once; otherwise it asks the approval hook (blocking up to the hook's
// deadline) and records the decision.
func (m *Manager) ApproveRelayed(ctx context.Context, id string, dst netip.AddrPort) bool {
	m.ifMu.Lock()
	h, held := m.relayHold[id]
	m.ifMu.Unlock()
	a := dst.Addr().Unmap()
	if !held || m.cfg.Approver == nil {
		return true
	}
	for _, p := range h.allow {
		if p.Contains(a) {
			return true
		}
	}
	if m.learnedName(h.ifname, a) != "" {
		return true // an allowOut domain resolved to it
	}
	d := approval.Dest{Protocol: "tcp", Addr: a, Port: dst.Port()}
	if m.cfg.DomainOf != nil {
		d.Domain = m.cfg.DomainOf(id, a)
	}
	if d.Domain == "" {
		d.Domain = m.ProxyName(id, a)
	}
	ans := m.cfg.Approver.Ask(ctx, id, d)
	m.noteApproval(id, d, ans)
	return ans.Allow
}
