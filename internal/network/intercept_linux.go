//go:build linux

package network

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Steering to the egress proxy (issue 29; internal/egressproxy): with
// Config.InterceptPort set, the table has the set intercept_addrs (key
// host veth . IPv4 address, flags timeout) holding, per sandbox with
// network rules, the addresses its ruled domains resolved to. Prerouting
// DNATs the sandbox's TCP to such an address on port 80 or 443 to the host
// side of its own veth, port InterceptPort, where the daemon's proxy
// listens and reads the original destination back (SO_ORIGINAL_DST).
// Input lets exactly that through: TCP to InterceptPort that conntrack
// says was DNATed, to an address of the very interface it came in on. A
// sandbox dialling the proxy port itself is dropped like any host port.

// InterceptSetName is the set of (host veth, address) pairs steered to the
// egress proxy.
const InterceptSetName = "intercept_addrs"

// InterceptPorts are the destination ports steered to the proxy.
var InterceptPorts = []uint16{443, 80}

// ipsDstNAT is IPS_DST_NAT of a conntrack entry's status.
const ipsDstNAT = 1 << 5

func newInterceptSet(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: InterceptSetName, Concatenation: true, HasTimeout: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIPAddr)}
}

func interceptKey(ifname string, a netip.Addr) []byte {
	b := a.As4()
	return append(ifnameKey(ifname), b[:]...)
}

// interceptRedirect builds the prerouting rule steering TCP to port dport
// of a steered address to (saddr & 255.255.255.252) | 1, port to.
func interceptRedirect(s *nftables.Set, dport, to uint16) []expr.Any {
	var r []expr.Any
	r = append(r, ipv4()...)
	r = append(r, l4DPort(unix.IPPROTO_TCP, dport)...)
	r = append(r,
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Payload{DestRegister: 2, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 255, 255, 252}, Xor: []byte{0, 0, 0, 1}},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(to)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	)
	return r
}

// interceptAccept builds the input rule letting steered connections reach
// the proxy: TCP to port, DNATed, to an address of the incoming interface.
func interceptAccept(port uint16) []expr.Any {
	var r []expr.Any
	r = append(r, ipv4()...)
	r = append(r, l4DPort(unix.IPPROTO_TCP, port)...)
	r = append(r,
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Fib{Register: 1, FlagDADDR: true, FlagIIF: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
		&expr.Verdict{Kind: expr.VerdictAccept},
	)
	return r
}

// intercept steers ifname's connections to addrs (port 80 and 443) to the
// proxy for max(ttl, MinLearnedTimeout); re-adding refreshes the timeout.
func (f *firewall) intercept(ifname string, addrs []netip.Addr, ttl time.Duration) error {
	if f.intercepts == nil {
		return errors.New("no egress proxy port configured")
	}
	ttl = max(ttl, MinLearnedTimeout)
	var elems []nftables.SetElement
	for _, a := range addrs {
		if a.Is4() {
			elems = append(elems, nftables.SetElement{Key: interceptKey(ifname, a), Timeout: ttl})
		}
	}
	if len(elems) == 0 {
		return nil
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	if err := c.SetAddElements(f.intercepts, elems); err != nil {
		return fmt.Errorf("updating set %s: %w", InterceptSetName, err)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("steering %s's addresses to the egress proxy: %w", ifname, err)
	}
	return nil
}

// interceptElems lists ifname's steered elements.
func (f *firewall) interceptElems(ifname string) ([]nftables.SetElement, error) {
	if f.intercepts == nil {
		return nil, nil
	}
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("opening nftables: %w", err)
	}
	elems, err := c.GetSetElements(f.intercepts)
	if err != nil {
		return nil, fmt.Errorf("reading set %s: %w", InterceptSetName, err)
	}
	prefix := ifnameKey(ifname)
	var out []nftables.SetElement
	for _, e := range elems {
		if len(e.Key) >= len(prefix)+4 && bytes.Equal(e.Key[:len(prefix)], prefix) {
			out = append(out, nftables.SetElement{Key: e.Key})
		}
	}
	return out, nil
}

// interceptedAddrs lists the addresses steered for ifname.
func (f *firewall) interceptedAddrs(ifname string) ([]netip.Addr, error) {
	elems, err := f.interceptElems(ifname)
	var out []netip.Addr
	for _, e := range elems {
		if a, ok := netip.AddrFromSlice(e.Key[len(e.Key)-4:]); ok {
			out = append(out, a)
		}
	}
	return out, err
}

// clearIntercept stops steering ifname's connections.
func (f *firewall) clearIntercept(ifname string) error {
	elems, err := f.interceptElems(ifname)
	if err != nil || len(elems) == 0 {
		return err
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	if err := c.SetDeleteElements(f.intercepts, elems); err != nil {
		return fmt.Errorf("updating set %s: %w", InterceptSetName, err)
	}
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("clearing the egress proxy steering of %s: %w", ifname, err)
	}
	return nil
}

// installIntercept adds the set and rules to the table being installed.
func (f *firewall) installIntercept(c *nftables.Conn, input, pre *nftables.Chain, fromUs []expr.Any) error {
	if f.intercepts == nil {
		return nil
	}
	s := *f.intercepts
	if err := c.AddSet(&s, nil); err != nil {
		return fmt.Errorf("adding set %s: %w", InterceptSetName, err)
	}
	for _, p := range InterceptPorts {
		c.AddRule(&nftables.Rule{Table: f.table, Chain: pre, Exprs: append(append([]expr.Any{}, fromUs...), interceptRedirect(&s, p, f.interceptPort)...)})
	}
	c.AddRule(&nftables.Rule{Table: f.table, Chain: input, Exprs: append(append([]expr.Any{}, fromUs...), interceptAccept(f.interceptPort)...)})
	return nil
}

// Intercept steers the TCP connections of sandbox id (in slot) to addrs on
// ports 80 and 443 to the egress proxy, for max(ttl, MinLearnedTimeout).
func (m *Manager) Intercept(id string, slot int, addrs []netip.Addr, ttl time.Duration) error {
	ep, err := m.EndpointFor(id, slot)
	if err != nil {
		return err
	}
	return m.fw.intercept(ep.HostIf, addrs, ttl)
}
