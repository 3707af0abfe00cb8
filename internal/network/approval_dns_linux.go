//go:build linux

package network

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/google/nftables"

	"github.com/airlock-sandbox/airlock/internal/approval"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/dnsfilter"
)

// The DNS hold: with a hook and domain rules in play, a query for a name
// the rules do not allow (and no denyOut name names) waits in the DNS
// filter until the hook answers. Allow: the query is forwarded and its
// answers' addresses go to the approved set (@ap_<veth>), so connecting
// to them asks nothing more; deny: REFUSED, as for a denied name.

// approvedNameKey is the key of m.approvedNames.
func approvedNameKey(ifname, name string) string {
	return ifname + "|" + strings.ToLower(strings.TrimSuffix(name, "."))
}

// holdName asks the hook about name for sandbox id (DNS filter's Decide).
func (m *Manager) holdName(id, ifname, name string) dnsfilter.Decision {
	if m.cfg.Approver == nil {
		return dnsfilter.Decision{Rule: "approval: no hook"}
	}
	d := approval.Dest{Protocol: approval.ProtocolDNS, Port: 53, Domain: strings.ToLower(strings.TrimSuffix(name, "."))}
	a := m.cfg.Approver.Ask(context.Background(), id, d)
	rule := fmt.Sprintf("approval by %s after %d ms", a.By, a.Wait.Milliseconds())
	dec := audit.Denied
	if a.Allow {
		dec = audit.Allowed
		keep := MinLearnedTimeout
		if a.For > 0 {
			keep = a.For
		} else if a.For < 0 {
			keep = 0 // the sandbox's life
		}
		m.approvedNames.Store(approvedNameKey(ifname, name), keep)
	}
	m.audit.Add(id, audit.Entry{Time: time.Now(), Kind: KindApproval, Decision: dec, Rule: rule, Protocol: approval.ProtocolDNS, Name: d.Domain})
	if m.cfg.ApprovalObserver != nil {
		m.cfg.ApprovalObserver(id, a)
	}
	return dnsfilter.Decision{Allow: a.Allow, Learn: a.Allow, Rule: rule}
}

// approvedName reports whether name was just approved for ifname's
// sandbox, and for how long its addresses stay open (0: for good); it is
// taken once (the filter's Learn follows its Decide).
func (m *Manager) approvedName(ifname, name string) (time.Duration, bool) {
	v, ok := m.approvedNames.LoadAndDelete(approvedNameKey(ifname, name))
	if !ok {
		return 0, false
	}
	return v.(time.Duration), true
}

// rememberAddrs adds addrs to ifname's approved set for d (0: for good).
func (f *firewall) rememberAddrs(ifname string, addrs []netip.Addr, d time.Duration) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	var els []nftables.SetElement
	for _, a := range addrs {
		if a.Is4() {
			a4 := a.As4()
			els = append(els, nftables.SetElement{Key: a4[:], Timeout: d})
		}
	}
	if len(els) == 0 {
		return nil
	}
	s := approvedSet(f.table, ifname)
	if err := c.SetAddElements(s, els); err != nil {
		return fmt.Errorf("updating set %s: %w", s.Name, err)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("opening approved addresses of %s: %w", ifname, err)
	}
	return nil
}
