//go:build linux

package network

import (
	"net/netip"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/audit"
)

// chainDenyOut is the regular chain holding the operator deny list
// (denyout.go). forward jumps to it, for IPv4 packets leaving a sandbox,
// after the always-blocked destinations and before the per-sandbox policy:
//
//	ip daddr <resolver> meta l4proto udp|tcp th dport 53 return
//	ip daddr <exception> return
//	ip daddr <denied range> [log] drop
//
// A return goes back to forward, where the sandbox's own policy decides.
const chainDenyOut = "deny_out"

// denyOutRulePrefix starts the audit rule of a connection the operator's
// list dropped: "operator deny 10.0.0.0/8".
const denyOutRulePrefix = "operator deny "

// installDenyOut adds the deny_out chain to the batch and returns the jump
// to it, or nil when the list is empty.
func (f *firewall) installDenyOut(c *nftables.Conn) []expr.Any {
	if len(f.denyOut) == 0 {
		return nil
	}
	ch := c.AddChain(&nftables.Chain{Name: chainDenyOut, Table: f.table})
	add := func(parts ...[]expr.Any) {
		exprs := ipv4() // the jump is IPv4-only; this keeps `nft list` readable
		for _, p := range parts {
			exprs = append(exprs, p...)
		}
		c.AddRule(&nftables.Rule{Table: f.table, Chain: ch, Exprs: exprs})
	}
	ret := verdict(expr.VerdictReturn)
	for _, r := range f.resolvers {
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			add(ipInPrefix(16, netip.PrefixFrom(r, 32)), l4DPort(proto, 53), ret)
		}
	}
	for _, p := range f.denyOutExcept {
		add(ipInPrefix(16, p), ret)
	}
	for _, p := range f.denyOut {
		if l := f.auditLog(auditDenied, denyOutRulePrefix+p.String()); l != nil {
			add(ipInPrefix(16, p), l)
		}
		add(ipInPrefix(16, p), verdict(expr.VerdictDrop))
	}
	return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: chainDenyOut}}
}

// ipv4Resolvers keeps the IPv4 addresses of rs (IPv4-mapped ones unmapped).
func ipv4Resolvers(rs []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, r := range rs {
		if r = r.Unmap(); r.Is4() {
			out = append(out, r)
		}
	}
	return out
}

// recentPolicyNotes is how many of a sandbox's latest audit entries are
// searched for a policy note before it is written again.
const recentPolicyNotes = 500

// noteDenyOutConflicts records, in the sandbox's egress audit log and the
// daemon's log, each allowOut entry of e that the operator deny list keeps
// closed: the create or update is accepted (E2B apps keep working) but the
// entry has no effect there, and this is where a user finds out why.
func (m *Manager) noteDenyOutConflicts(id string, e Egress) {
	conflicts := m.cfg.DenyOutConflicts(e.Allow)
	if len(conflicts) == 0 {
		return
	}
	// The same policy is set again at every daemon start (the firewall is
	// rebuilt): a note still among the sandbox's recent entries is not
	// written twice.
	seen := map[string]bool{}
	for _, en := range m.audit.Last(id, recentPolicyNotes) {
		if en.Kind == audit.KindPolicy {
			seen[en.Rule] = true
		}
	}
	now := time.Now()
	for _, a := range e.Allow { // in the order the user gave them
		ds, ok := conflicts[a]
		if !ok {
			continue
		}
		names := make([]string, len(ds))
		for i, d := range ds {
			names[i] = d.String()
		}
		rule := "allowOut " + prefixString(a) + " does not open " + denyOutRulePrefix + strings.Join(names, ", ")
		if seen[rule] {
			continue
		}
		m.audit.Add(id, audit.Entry{Time: now, Kind: audit.KindPolicy, Decision: audit.Denied, Rule: rule})
		m.log.Info("allowOut entry cannot open the operator's deny list (--deny-out)", "sandbox", id,
			"allowOut", prefixString(a), "deny_out", strings.Join(names, ","))
	}
}
