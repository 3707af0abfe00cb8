//go:build linux

package network

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Tunnelling through a sandbox's egressProxy (E2B's SOCKS5 upstream, issue
// 29; internal/socksrelay). With Config.SocksPort set, the table has the
// set socks_ifaces (host veth names of sandboxes with an egressProxy) and:
//
//   - a filter chain socks_pre on prerouting (priority -150: after
//     conntrack, before the NAT of -100) that sends every TCP packet such a
//     sandbox originates (ct direction original; DNS, which goes to the
//     daemon's filter, and the microVM volume server excepted) through the
//     regular chain socks_out, which holds the very rules forward applies
//     to a sandbox's outbound packets (blocked ranges, the operator's deny
//     list, allowOut/denyOut, the internet switch), matched against the
//     original destination: a denied one is dropped there, before the
//     redirect would hide it from forward;
//   - in prerouting NAT, after the DNS and interception redirects, a DNAT
//     of that TCP to the host side of its own veth, port SocksPort, where
//     the relay reads the original destination back (SO_ORIGINAL_DST) and
//     opens it through the SOCKS5 server;
//   - in input, the accept of exactly that (DNATed, to an address of the
//     incoming interface), like the interception's;
//   - in forward, a drop of anything else from such a sandbox: its non-DNS
//     UDP, ICMP, and whatever did not take the redirect. Nothing leaves
//     directly.

// SocksSetName is the set of host veths whose TCP goes to the SOCKS relay.
const SocksSetName = "socks_ifaces"

// socksBypassRule names the forward drop in the audit log.
const socksBypassRule = "egressProxy: direct traffic"

const (
	chainSocksPre = "socks_pre"
	chainSocksOut = "socks_out"
)

func newSocksSet(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: SocksSetName, KeyType: nftables.TypeIFName, KeyByteOrder: binaryutil.NativeEndian}
}

// ctOriginal matches ct direction original.
func ctOriginal() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyDIRECTION},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0}}, // IP_CT_DIR_ORIGINAL
	}
}

// l4proto matches meta l4proto proto.
func l4proto(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

// socksRedirect builds the prerouting NAT rule steering a socks sandbox's
// TCP to (saddr & 255.255.255.252) | 1, port to.
func socksRedirect(s *nftables.Set, to uint16) []expr.Any {
	var r []expr.Any
	r = append(r, inSet(s)...)
	r = append(r, ipv4()...)
	r = append(r, l4proto(unix.IPPROTO_TCP)...)
	r = append(r,
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 255, 255, 252}, Xor: []byte{0, 0, 0, 1}},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(to)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	)
	return r
}

// installSocks adds the set, the socks_pre and socks_out chains and the
// redirect and accept rules to the table being installed; it returns
// socks_out for the caller to fill with the outbound policy, and the set
// as added to the batch (both nil without a SocksPort).
func (f *firewall) installSocks(c *nftables.Conn, input, pre *nftables.Chain, fromUs []expr.Any) (*nftables.Chain, *nftables.Set, error) {
	if f.socks == nil {
		return nil, nil, nil
	}
	s := *f.socks
	if err := c.AddSet(&s, nil); err != nil {
		return nil, nil, fmt.Errorf("adding set %s: %w", SocksSetName, err)
	}
	accept := nftables.ChainPolicyAccept
	socksPre := c.AddChain(&nftables.Chain{
		Name: chainSocksPre, Table: f.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityNATDest - 50),
		Policy: &accept,
	})
	out := c.AddChain(&nftables.Chain{Name: chainSocksOut, Table: f.table})
	add := func(ch *nftables.Chain, parts ...[]expr.Any) {
		exprs := append([]expr.Any{}, fromUs...)
		for _, p := range parts {
			exprs = append(exprs, p...)
		}
		c.AddRule(&nftables.Rule{Table: f.table, Chain: ch, Exprs: exprs})
	}
	tcp := append(append(append(inSet(&s), ipv4()...), ctOriginal()...), l4proto(unix.IPPROTO_TCP)...)
	ret := verdict(expr.VerdictReturn)
	// DNS goes to the daemon's filter (socks sandboxes are in dns_ifaces).
	add(socksPre, tcp, l4DPort(unix.IPPROTO_TCP, 53), ret)
	// The microVM volume server (volumes_linux.go).
	add(socksPre, tcp, ipInPrefix(16, netip.PrefixFrom(VolumeServerAddr, 32)), l4DPort(unix.IPPROTO_TCP, VolumeGuestPort), ret)
	add(socksPre, tcp, []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: chainSocksOut}})
	// After installIntercept's redirects: a ruled connection goes to the
	// interception proxy, whose upstream dial is the relay's SOCKS dial.
	add(pre, socksRedirect(&s, f.socksPort))
	add(input, inSet(&s), interceptAccept(f.socksPort))
	return out, &s, nil
}

// setSocks adds or removes ifname in socks_ifaces. Removing a missing
// element is not an error.
func (f *firewall) setSocks(ifname string, on bool) error {
	if f.socks == nil {
		if on {
			return fmt.Errorf("%w: network.egressProxy needs the SOCKS relay, which this node does not run", ErrInvalid)
		}
		return nil
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	elems := []nftables.SetElement{{Key: ifnameKey(ifname)}}
	if on {
		err = c.SetAddElements(f.socks, elems)
	} else {
		err = c.SetDeleteElements(f.socks, elems)
	}
	if err != nil {
		return fmt.Errorf("updating set %s: %w", SocksSetName, err)
	}
	if err := c.Flush(); err != nil {
		if !on && errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("updating set %s (%s on=%v): %w", SocksSetName, ifname, on, err)
	}
	return nil
}

// socksMember reports whether ifname is in socks_ifaces (tests).
func (f *firewall) socksMember(ifname string) (bool, error) {
	if f.socks == nil {
		return false, nil
	}
	c, err := nftables.New()
	if err != nil {
		return false, fmt.Errorf("opening nftables: %w", err)
	}
	elems, err := c.GetSetElements(f.socks)
	if err != nil {
		return false, fmt.Errorf("reading set %s: %w", SocksSetName, err)
	}
	for _, e := range elems {
		if unix.ByteSliceToString(e.Key) == ifname {
			return true, nil
		}
	}
	return false, nil
}

// applySocks switches the relay on or off for the sandbox behind ep. On, it
// comes after applyDNS (the sandbox's DNS must reach the filter, which
// records the names the relay hands the SOCKS server); off, the recorded
// names are dropped.
func (m *Manager) applySocks(ep *Endpoint, on bool) error {
	if !on {
		m.dropProxyNames(ep.ID)
	}
	return m.fw.setSocks(ep.HostIf, on)
}

func (m *Manager) dropProxyNames(id string) { m.names.drop(id) }

// ProxyName returns the name sandbox id last resolved to a through the DNS
// filter while it had an egressProxy, "" when none is known.
func (m *Manager) ProxyName(id string, a netip.Addr) string { return m.names.lookup(id, a) }
