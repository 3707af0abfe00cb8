//go:build linux

package network

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/dnsfilter"
)

// DNS-aware egress (see internal/network/doc.go, "Egress policy"):
//
//   - a sandbox with domain rules is in the set dns_ifaces; prerouting
//     rewrites its DNS packets (UDP and TCP port 53, to any address) to the
//     host side of its own veth, where the daemon's dnsfilter listens;
//   - input accepts those packets only when the destination is an address of
//     the very interface they came in on (fib daddr . iif type local), so a
//     sandbox reaches no other host service and no other sandbox's resolver;
//   - the A answers of names its allowOut lists are added to its own set
//     dl_<veth> (flags timeout), which its egress chain accepts first.

// DNSSetName is the set of host veths whose DNS goes to the daemon.
const DNSSetName = "dns_ifaces"

// chainPrerouting is the NAT chain that redirects DNS.
const chainPrerouting = "prerouting"

// learnedSetPrefix + host veth name is a sandbox's set of learned addresses.
const learnedSetPrefix = "dl_"

// MinLearnedTimeout is the shortest time a learned address stays open.
// Addresses are kept for max(TTL, MinLearnedTimeout): the forward chain
// checks every packet, so a short TTL would cut long connections.
const MinLearnedTimeout = 5 * time.Minute

func newDNSSet(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: DNSSetName, KeyType: nftables.TypeIFName, KeyByteOrder: binaryutil.NativeEndian}
}

func learnedSet(t *nftables.Table, ifname string) *nftables.Set {
	return &nftables.Set{Table: t, Name: learnedSetPrefix + ifname, KeyType: nftables.TypeIPAddr, HasTimeout: true}
}

// dnsRedirect builds the prerouting rules: DNS of a sandbox in @dns_ifaces
// goes to (saddr & 255.255.255.252) | 1 — the host side of its /30 — port
// port, for proto (unix.IPPROTO_UDP or _TCP).
func dnsRedirect(s *nftables.Set, proto byte, port uint16) []expr.Any {
	var r []expr.Any
	r = append(r, inSet(s)...)
	r = append(r, ipv4()...)
	r = append(r, l4DPort(proto, 53)...)
	r = append(r,
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 255, 255, 252}, Xor: []byte{0, 0, 0, 1}},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	)
	return r
}

// dnsAccept builds the input rule letting redirected DNS reach the daemon:
// only to an address of the interface the packet came in on.
func dnsAccept(s *nftables.Set, proto byte, port uint16) []expr.Any {
	var r []expr.Any
	r = append(r, inSet(s)...)
	r = append(r, ipv4()...)
	r = append(r, l4DPort(proto, port)...)
	r = append(r,
		&expr.Fib{Register: 1, FlagDADDR: true, FlagIIF: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
		&expr.Verdict{Kind: expr.VerdictAccept},
	)
	return r
}

// inSet matches iifname in @s.
func inSet(s *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID},
	}
}

// l4DPort matches meta l4proto proto and th dport port.
func l4DPort(proto byte, port uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	}
}

// learnedAccept matches ip daddr @dl_<ifname> accept.
func learnedAccept(s *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID},
	}
}

// setDNS adds or removes ifname in the dns set. Removing a missing element
// is not an error.
func (f *firewall) setDNS(ifname string, on bool) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	elems := []nftables.SetElement{{Key: ifnameKey(ifname)}}
	if on {
		err = c.SetAddElements(f.dns, elems)
	} else {
		err = c.SetDeleteElements(f.dns, elems)
	}
	if err != nil {
		return fmt.Errorf("updating set %s: %w", DNSSetName, err)
	}
	if err := c.Flush(); err != nil {
		if !on && errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("updating set %s (%s on=%v): %w", DNSSetName, ifname, on, err)
	}
	return nil
}

// learn opens addrs for ifname's sandbox for max(ttl, MinLearnedTimeout).
// Re-adding an address refreshes its timeout.
func (f *firewall) learn(ifname string, addrs []netip.Addr, ttl time.Duration) error {
	if ttl < MinLearnedTimeout {
		ttl = MinLearnedTimeout
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	var elems []nftables.SetElement
	for _, a := range addrs {
		if !a.Is4() {
			continue
		}
		b := a.As4()
		elems = append(elems, nftables.SetElement{Key: b[:], Timeout: ttl})
	}
	if len(elems) == 0 {
		return nil
	}
	if err := c.SetAddElements(learnedSet(f.table, ifname), elems); err != nil {
		return fmt.Errorf("updating set %s%s: %w", learnedSetPrefix, ifname, err)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("opening learned addresses of %s: %w", ifname, err)
	}
	return nil
}

// learnedAddrs lists ifname's learned addresses (tests and diagnostics).
func (f *firewall) learnedAddrs(ifname string) ([]netip.Addr, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("opening nftables: %w", err)
	}
	elems, err := c.GetSetElements(learnedSet(f.table, ifname))
	if err != nil {
		return nil, fmt.Errorf("reading set %s%s: %w", learnedSetPrefix, ifname, err)
	}
	var out []netip.Addr
	for _, e := range elems {
		if a, ok := netip.AddrFromSlice(e.Key); ok {
			out = append(out, a)
		}
	}
	return out, nil
}

// applyDNS starts or stops the DNS filter of the sandbox behind ep for
// policy opts. With domain rules the resolver runs first and the redirect
// is switched on after, so DNS never points at nothing.
func (m *Manager) applyDNS(ep *Endpoint, opts Options) error {
	if len(opts.Intercept) > 0 && m.fw.intercepts == nil {
		return fmt.Errorf("%w: network rules need the egress proxy, which this node does not run", ErrInvalid)
	}
	if err := m.fw.clearIntercept(ep.HostIf); err != nil { // the rules may have changed
		return err
	}
	if !opts.needsDNS() {
		if err := m.fw.setDNS(ep.HostIf, false); err != nil {
			return err
		}
		if m.dns != nil {
			m.dns.Stop(ep.ID)
		}
		return nil
	}
	if m.dns == nil {
		return fmt.Errorf("%w: domain rules and network rules need the DNS filter (no --dns-upstream)", ErrInvalid)
	}
	eg, internet, ifname, id := opts.Egress, opts.AllowInternet, ep.HostIf, ep.ID
	err := m.dns.Start(dnsfilter.Sandbox{
		ID:     id,
		Listen: ep.HostIP,
		Client: ep.GuestIP,
		Decide: func(name string) dnsfilter.Decision {
			v := eg.DecideName(name, internet)
			if !v.Allow && eg.Hold && !strings.HasPrefix(v.Rule, "denyOut ") {
				return m.holdName(id, ifname, name) // approval_dns_linux.go
			}
			// A ruled domain's answers are learned for the steering
			// (if the policy lets the name resolve at all).
			return dnsfilter.Decision{Allow: v.Allow, Learn: v.Learn || (v.Allow && (opts.intercepted(name) || opts.EgressProxy)), Rule: v.Rule}
		},
		Learn: func(name string, addrs []netip.Addr, ttl time.Duration) error {
			if opts.EgressProxy { // the names the SOCKS relay asks for (socks_linux.go)
				m.names.note(id, name, addrs)
			}
			if opts.intercepted(name) {
				// Steered before the answer reaches the sandbox.
				if err := m.fw.intercept(ifname, addrs, ttl); err != nil {
					return err
				}
			}
			if t, ok := m.approvedName(ifname, name); ok { // approval_dns_linux.go
				if t > 0 {
					t = max(ttl, t)
				}
				return m.fw.rememberAddrs(ifname, addrs, t)
			}
			if !eg.DecideName(name, internet).Learn {
				return nil
			}
			m.noteLearned(ifname, name, addrs)
			return m.fw.learn(ifname, addrs, ttl)
		},
		Record: func(ev dnsfilter.Event) {
			d := audit.Denied
			if ev.Allowed {
				d = audit.Allowed
			}
			m.audit.Add(id, audit.Entry{Time: ev.Time, Kind: audit.KindDNS, Decision: d, Rule: ev.Rule,
				Name: ev.Name, QType: ev.QType, Answers: ev.Answers})
		},
	})
	if err != nil {
		return err
	}
	m.remember(ifname, id)
	return m.fw.setDNS(ifname, true)
}

// stopDNS ends the sandbox's DNS filter (teardown).
func (m *Manager) stopDNS(ep *Endpoint) error {
	if m.dns != nil {
		m.dns.Stop(ep.ID)
	}
	return m.fw.setDNS(ep.HostIf, false)
}

// EgressLog returns up to limit of the sandbox's most recent audit entries,
// oldest first.
func (m *Manager) EgressLog(id string, limit int) []audit.Entry {
	return m.audit.Last(id, limit)
}
