//go:build linux

package network

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// EgressMapName is the verdict map "host veth name : jump <egress chain>".
// The forward chain consults it after the always-blocked destinations and
// before the internet set, so a sandbox's chain can accept (allowOut) or
// drop (denyOut) a destination; when it returns, the internet set decides.
const EgressMapName = "egress_policy"

// egressChainPrefix + host veth name is a sandbox's egress chain.
const egressChainPrefix = "eg_"

func newEgressMap(t *nftables.Table) *nftables.Set {
	return &nftables.Set{
		Table: t, Name: EgressMapName, IsMap: true,
		KeyType: nftables.TypeIFName, KeyByteOrder: binaryutil.NativeEndian,
		DataType: nftables.TypeVerdict,
	}
}

// egressChainName is the per-sandbox chain of host veth ifname.
func egressChainName(ifname string) string { return egressChainPrefix + ifname }

// egressRules builds the rule bodies of a sandbox's egress chain: allowOut
// accepts first (it takes precedence), then denyOut drops. No final verdict:
// the chain returns to forward, where the internet set decides.
//
// With audit logging (f.logGroup != 0) every verdict rule is preceded by a
// rule with the same match that logs new flows.
func (f *firewall) egressRules(e Egress) [][]expr.Any {
	var rules [][]expr.Any
	add := func(ps []netip.Prefix, k expr.VerdictKind, decision, field string) {
		for _, p := range ps {
			var r []expr.Any
			r = append(r, ipv4()...)
			r = append(r, ipInPrefix(16, p)...)
			if l := f.auditLog(decision, field+" "+prefixString(p)); l != nil {
				rules = append(rules, append(append([]expr.Any(nil), r...), l...))
			}
			rules = append(rules, append(r, verdict(k)...))
		}
	}
	add(e.Allow, expr.VerdictAccept, auditAllowed, "allowOut")
	if e.Hold { // the catch-all denies come after the hold (approval_linux.go)
		add(specific(e.Deny), expr.VerdictDrop, auditDenied, "denyOut")
		return rules
	}
	add(e.Deny, expr.VerdictDrop, auditDenied, "denyOut")
	return rules
}

// egressLookup matches "iifname vmap @egress_policy".
func egressLookup(s *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID, DestRegister: 0, IsDestRegSet: true},
	}
}

// setEgress replaces the egress chain of ifname with e, or removes it when
// e is empty. The chain is rebuilt and the map points at it in one batch.
func (f *firewall) setEgress(ifname string, e Egress) error {
	if e.Empty() {
		return f.clearEgress(ifname)
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	ch := c.AddChain(&nftables.Chain{Name: egressChainName(ifname), Table: f.table})
	c.FlushChain(ch)
	learned := learnedSet(f.table, ifname)
	if len(e.AllowDomains) > 0 {
		// A policy change forgets what was learned under the old one.
		if err := c.AddSet(learned, nil); err != nil {
			return fmt.Errorf("adding set %s: %w", learned.Name, err)
		}
		c.FlushSet(learned)
		if l := f.auditLog(auditAllowed, auditLearned); l != nil {
			c.AddRule(&nftables.Rule{Table: f.table, Chain: ch, Exprs: append(learnedAccept(learned), l...)})
		}
		c.AddRule(&nftables.Rule{Table: f.table, Chain: ch, Exprs: append(learnedAccept(learned), verdict(expr.VerdictAccept)...)})
	}
	for _, r := range f.egressRules(e) {
		c.AddRule(&nftables.Rule{Table: f.table, Chain: ch, Exprs: r})
	}
	switch {
	case e.Hold && e.Relayed:
		f.addRelayHold(c, ch, e) // relayhold_linux.go
	case e.Hold:
		if err := f.addHold(c, ch, ifname, e, f.approvalQueue); err != nil {
			return err
		}
	}
	el := []nftables.SetElement{{Key: ifnameKey(ifname), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: ch.Name}}}
	if err := c.SetAddElements(f.egress, el); err != nil {
		return fmt.Errorf("updating map %s: %w", EgressMapName, err)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("installing egress policy of %s: %w", ifname, err)
	}
	if !e.Hold || e.Relayed {
		if err := f.delHold(ifname); err != nil {
			return err
		}
	}
	if len(e.AllowDomains) == 0 {
		return f.delLearned(ifname)
	}
	return nil
}

// delLearned removes ifname's learned set; missing is fine. Its chain must
// no longer refer to it.
func (f *firewall) delLearned(ifname string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	c.DelSet(learnedSet(f.table, ifname))
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing set %s%s: %w", learnedSetPrefix, ifname, err)
	}
	return nil
}

// clearEgress removes ifname's map element and chain; missing is fine.
func (f *firewall) clearEgress(ifname string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	if err := c.SetDeleteElements(f.egress, []nftables.SetElement{{Key: ifnameKey(ifname)}}); err != nil {
		return fmt.Errorf("updating map %s: %w", EgressMapName, err)
	}
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing egress policy of %s: %w", ifname, err)
	}
	ch := &nftables.Chain{Name: egressChainName(ifname), Table: f.table}
	c.FlushChain(ch)
	c.DelChain(ch)
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing egress chain of %s: %w", ifname, err)
	}
	if err := f.delHold(ifname); err != nil {
		return err
	}
	return f.delLearned(ifname)
}

// egressRuleCount returns the number of rules in ifname's egress chain and
// whether the map points at it (tests and diagnostics).
func (f *firewall) egressRuleCount(ifname string) (int, bool, error) {
	c, err := nftables.New()
	if err != nil {
		return 0, false, fmt.Errorf("opening nftables: %w", err)
	}
	elems, err := c.GetSetElements(f.egress)
	if err != nil {
		return 0, false, fmt.Errorf("reading map %s: %w", EgressMapName, err)
	}
	mapped := false
	for _, el := range elems {
		if unix.ByteSliceToString(el.Key) == ifname {
			mapped = true
		}
	}
	rules, err := c.GetRules(f.table, &nftables.Chain{Name: egressChainName(ifname), Table: f.table})
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return 0, mapped, nil
		}
		return 0, mapped, fmt.Errorf("listing egress chain of %s: %w", ifname, err)
	}
	return len(rules), mapped, nil
}

// SetEgress replaces the allowOut/denyOut policy of the sandbox (an empty
// policy removes it). The sandbox's veth must exist (ErrNotFound otherwise).
func (m *Manager) SetEgress(ctx context.Context, id string, slot int, e Egress) error {
	ep, err := m.EndpointFor(id, slot)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if e.Hold && !m.HoldsApprovals() {
		return ErrNoApprovalHold
	}
	if _, err := netlink.LinkByName(ep.HostIf); err != nil {
		if isLinkNotFound(err) {
			return fmt.Errorf("%w: veth %s of sandbox %s", ErrNotFound, ep.HostIf, id)
		}
		return fmt.Errorf("looking up veth %s: %w", ep.HostIf, err)
	}
	if err := m.fw.setEgress(ep.HostIf, e); err != nil {
		return err
	}
	m.noteRelayHold(id, ep.HostIf, e) // relayhold_linux.go
	m.noteDenyOutConflicts(id, e)
	return nil
}

// SetPolicy sets both the internet switch and the egress policy.
func (m *Manager) SetPolicy(ctx context.Context, id string, slot int, opts Options) error {
	if err := m.SetEgress(ctx, id, slot, opts.egress()); err != nil {
		return err
	}
	ep, err := m.EndpointFor(id, slot)
	if err != nil {
		return err
	}
	if err := m.applyDNS(ep, opts); err != nil {
		return err
	}
	if err := m.applySocks(ep, opts.EgressProxy); err != nil { // socks_linux.go
		return err
	}
	return m.SetInternet(ctx, id, slot, opts.AllowInternet)
}
