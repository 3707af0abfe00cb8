//go:build linux

package network

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// InternetSetName is the nftables set of host veth names whose sandboxes may
// reach the outside world.
const InternetSetName = "internet_ifaces"

// Chain names in the table.
const (
	chainInput       = "input"
	chainForward     = "forward"
	chainPostrouting = "postrouting"
)

// firewall owns the nftables table "inet <NamePrefix>".
type firewall struct {
	table  *nftables.Table
	set    *nftables.Set
	egress *nftables.Set // verdict map, see egress_linux.go
	dns    *nftables.Set // DNS redirect, see dns_linux.go
	cut    *nftables.Set // cut-off sandboxes, see cut_linux.go
	cutc   cutConn       // the cut set's updates (cut_linux.go)
	// intercepts: steering to the egress proxy (intercept_linux.go), nil
	// without an InterceptPort.
	intercepts    *nftables.Set
	interceptPort uint16
	// socks: sandboxes with an egressProxy, relayed to socksPort
	// (socks_linux.go); nil without a SocksPort.
	socks         *nftables.Set
	socksPort     uint16
	dnsPort       uint16
	logGroup      uint16 // NFLOG group of the audit rules, 0 = none (audit_linux.go)
	approvalQueue uint16 // NFQUEUE of the approval hold (approval_linux.go)
	ifPrefix      string
	subnet        netip.Prefix
	// The operator deny list, its exceptions and the sandboxes' resolvers
	// (denyout_linux.go).
	denyOut, denyOutExcept []netip.Prefix
	resolvers              []netip.Addr
	// blocked is the set of cluster addresses (blocked_linux.go);
	// blockedAddrs its contents, which a reinstall keeps.
	blocked      *nftables.Set
	blockedMu    sync.Mutex
	blockedAddrs []netip.Addr
}

func newFirewall(cfg Config) *firewall {
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: cfg.NamePrefix}
	var intercepts *nftables.Set
	if cfg.InterceptPort != 0 {
		intercepts = newInterceptSet(t)
	}
	var socks *nftables.Set
	if cfg.SocksPort != 0 {
		socks = newSocksSet(t)
	}
	return &firewall{
		intercepts: intercepts, interceptPort: cfg.InterceptPort,
		socks: socks, socksPort: cfg.SocksPort,
		table:         t,
		set:           &nftables.Set{Table: t, Name: InternetSetName, KeyType: nftables.TypeIFName, KeyByteOrder: binaryutil.NativeEndian},
		egress:        newEgressMap(t),
		dns:           newDNSSet(t),
		cut:           newCutSet(t),
		dnsPort:       cfg.DNSPort,
		logGroup:      cfg.AuditGroup,
		approvalQueue: cfg.ApprovalQueue,
		ifPrefix:      IfacePrefix(cfg.NamePrefix),
		subnet:        cfg.Subnet,

		denyOut:       cfg.DenyOut,
		denyOutExcept: cfg.DenyOutExcept,
		resolvers:     ipv4Resolvers(cfg.Resolvers),
		blocked:       newBlockedSet(t),
		blockedAddrs:  cfg.BlockedAddrs,
	}
}

// ifnameKey encodes an interface name the way the kernel compares it
// (IFNAMSIZ bytes, NUL padded).
func ifnameKey(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

// currentMembers returns the members of set s of an existing table, or nil
// when there is none.
func (f *firewall) currentMembers(s *nftables.Set) ([]string, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("opening nftables: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("listing nftables tables: %w", err)
	}
	found := false
	for _, t := range tables {
		found = found || t.Name == f.table.Name
	}
	if !found {
		return nil, nil
	}
	// A table of an older version may lack the set: treat it as empty
	// (nftables reports a missing set without a testable error).
	sets, err := c.GetSets(f.table)
	if err != nil {
		return nil, fmt.Errorf("listing sets of inet %s: %w", f.table.Name, err)
	}
	if !slices.ContainsFunc(sets, func(x *nftables.Set) bool { return x.Name == s.Name }) {
		return nil, nil
	}
	elems, err := c.GetSetElements(s)
	if err != nil {
		return nil, fmt.Errorf("reading set %s: %w", s.Name, err)
	}
	var names []string
	for _, e := range elems {
		names = append(names, unix.ByteSliceToString(e.Key))
	}
	return names, nil
}

// install atomically replaces the table with a fresh one holding the policy,
// with keep as the initial members of the internet set and keepCut those of
// the cut set.
func (f *firewall) install(keep, keepCut []string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	// add + delete + add in one batch: replaces the table whether or not it
	// existed, atomically.
	c.AddTable(f.table)
	c.DelTable(f.table)
	c.AddTable(f.table)

	var elems []nftables.SetElement
	for _, n := range keep {
		elems = append(elems, nftables.SetElement{Key: ifnameKey(n)})
	}
	set := *f.set // AddSet assigns a transaction id; keep f.set untouched
	if err := c.AddSet(&set, elems); err != nil {
		return fmt.Errorf("adding set %s: %w", InternetSetName, err)
	}
	egress := *f.egress
	if err := c.AddSet(&egress, nil); err != nil {
		return fmt.Errorf("adding map %s: %w", EgressMapName, err)
	}
	dns := *f.dns
	if err := c.AddSet(&dns, nil); err != nil {
		return fmt.Errorf("adding set %s: %w", DNSSetName, err)
	}
	blocked := *f.blocked
	f.blockedMu.Lock()
	err = c.AddSet(&blocked, blockedElems(f.blockedAddrs))
	f.blockedMu.Unlock()
	if err != nil {
		return fmt.Errorf("adding set %s: %w", BlockedSetName, err)
	}

	accept := nftables.ChainPolicyAccept
	input := c.AddChain(&nftables.Chain{
		Name: chainInput, Table: f.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityFilter - 10),
		Policy: &accept,
	})
	forward := c.AddChain(&nftables.Chain{
		Name: chainForward, Table: f.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityFilter - 10),
		Policy: &accept,
	})
	if err := f.installCut(c, input, forward, keepCut); err != nil {
		return err
	}
	post := c.AddChain(&nftables.Chain{
		Name: chainPostrouting, Table: f.table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
		Policy: &accept,
	})
	pre := c.AddChain(&nftables.Chain{
		Name: chainPrerouting, Table: f.table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest,
		Policy: &accept,
	})

	rule := func(ch *nftables.Chain, parts ...[]expr.Any) {
		var exprs []expr.Any
		for _, p := range parts {
			exprs = append(exprs, p...)
		}
		c.AddRule(&nftables.Rule{Table: f.table, Chain: ch, Exprs: exprs})
	}
	fromUs := f.ifaceMatch(expr.MetaKeyIIFNAME, expr.CmpOpEq)
	toUs := f.ifaceMatch(expr.MetaKeyOIFNAME, expr.CmpOpEq)
	notToUs := f.ifaceMatch(expr.MetaKeyOIFNAME, expr.CmpOpNeq)

	// logged adds an audit log rule (new flows only) in front of a
	// verdict rule with the same match.
	logged := func(ch *nftables.Chain, decision, why string, k expr.VerdictKind, parts ...[]expr.Any) {
		if l := f.auditLog(decision, why); l != nil {
			rule(ch, append(parts, l)...)
		}
		rule(ch, append(parts, verdict(k))...)
	}

	// input: sandboxes only answer connections the host opened.
	// The one exception: DNS of sandboxes with domain rules, redirected
	// in prerouting to the host side of their own veth.
	rule(input, fromUs, ctEstablished(), verdict(expr.VerdictAccept))
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		rule(input, fromUs, dnsAccept(&dns, proto, f.dnsPort))
		rule(pre, fromUs, dnsRedirect(&dns, proto, f.dnsPort))
	}
	// microVM volume servers (volumes_linux.go).
	rule(pre, fromUs, volumeRedirect())
	rule(input, fromUs, volumeAccept())
	if err := f.installIntercept(c, input, pre, fromUs); err != nil { // intercept_linux.go
		return err
	}
	socksOut, socksSet, err := f.installSocks(c, input, pre, fromUs) // socks_linux.go
	if err != nil {
		return err
	}
	logged(input, auditDenied, "host", expr.VerdictDrop, fromUs)

	// forward: never sandbox to sandbox; never to blocked destinations;
	// outside only when allowed; inbound only as replies.
	logged(forward, auditDenied, "other sandbox", expr.VerdictDrop, fromUs, toUs)
	if socksSet != nil { // a sandbox with egressProxy sends nothing directly
		logged(forward, auditDenied, socksBypassRule, expr.VerdictDrop, fromUs, inSet(socksSet))
	}
	denyOutJump := f.installDenyOut(c)
	// The sandbox's outbound policy, in forward and (for connections
	// relayed to its egressProxy, socks_linux.go) in socksOut.
	outbound := func(forward *nftables.Chain) {
		logged(forward, auditDenied, "sandbox pool "+f.subnet.String(), expr.VerdictDrop, fromUs, ipv4(), ipInPrefix(16, f.subnet))
		for _, p := range blockedDestinations {
			logged(forward, auditDenied, "blocked range "+p.String(), expr.VerdictDrop, fromUs, ipv4(), ipInPrefix(16, p))
		}
		// Always blocked but for DNS (Azure's WireServer is also its resolver):
		// everything but UDP and TCP, then everything but port 53.
		for _, p := range blockedButDNS {
			why := "blocked range " + p.String()
			logged(forward, auditDenied, why, expr.VerdictDrop, fromUs, ipv4(), ipInPrefix(16, p), notTCPOrUDP())
			logged(forward, auditDenied, why, expr.VerdictDrop, fromUs, ipv4(), ipInPrefix(16, p), dportNot(53))
		}
		// The cluster's own addresses (blocked_linux.go).
		logged(forward, auditDenied, blockedRule, expr.VerdictDrop, fromUs, daddrInSet(&blocked))
		// The operator's deny list: no per-sandbox rule can open it.
		if denyOutJump != nil {
			rule(forward, fromUs, ipv4(), denyOutJump)
		}
		rule(forward, fromUs, egressLookup(&egress))
		logged(forward, auditAllowed, "internet", expr.VerdictAccept, fromUs, ipv4(), inInternetSet(&set))
		logged(forward, auditDenied, "no internet", expr.VerdictDrop, fromUs)
	}
	outbound(forward)
	if socksOut != nil {
		outbound(socksOut)
	}
	rule(forward, toUs, ctEstablished(), verdict(expr.VerdictAccept))
	rule(forward, toUs, verdict(expr.VerdictDrop))

	// postrouting: NAT the pool when it leaves through a non-sandbox iface.
	rule(post, ipv4(), ipInPrefix(12, f.subnet), notToUs, []expr.Any{&expr.Masq{}})

	if err := c.Flush(); err != nil {
		return fmt.Errorf("installing nftables table inet %s: %w", f.table.Name, err)
	}
	return nil
}

// setInternet adds or removes ifname in the internet set. Removing a missing
// element is not an error.
func (f *firewall) setInternet(ifname string, allow bool) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	elems := []nftables.SetElement{{Key: ifnameKey(ifname)}}
	if allow {
		err = c.SetAddElements(f.set, elems)
	} else {
		err = c.SetDeleteElements(f.set, elems)
	}
	if err != nil {
		return fmt.Errorf("updating set %s: %w", InternetSetName, err)
	}
	if err := c.Flush(); err != nil {
		if !allow && errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("updating set %s (%s allow=%v): %w", InternetSetName, ifname, allow, err)
	}
	return nil
}

// internetMembers lists the internet set.
func (f *firewall) internetMembers() ([]string, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("opening nftables: %w", err)
	}
	elems, err := c.GetSetElements(f.set)
	if err != nil {
		return nil, fmt.Errorf("reading set %s: %w", InternetSetName, err)
	}
	names := make([]string, 0, len(elems))
	for _, e := range elems {
		names = append(names, unix.ByteSliceToString(e.Key))
	}
	return names, nil
}

// remove deletes the table; a missing table is not an error.
func (f *firewall) remove() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	c.DelTable(f.table)
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("deleting nftables table inet %s: %w", f.table.Name, err)
	}
	return nil
}

// ifaceMatch matches iifname/oifname against our prefix wildcard ("al*").
func (f *firewall) ifaceMatch(key expr.MetaKey, op expr.CmpOp) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: []byte(f.ifPrefix)},
	}
}

// ipv4 restricts a rule of the inet table to IPv4 packets.
func ipv4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}
}

// ipInPrefix matches the IPv4 address at network-header offset off (12 =
// saddr, 16 = daddr) against p.
func ipInPrefix(off uint32, p netip.Prefix) []expr.Any {
	mask := netipMask(p.Bits())
	net4 := p.Masked().Addr().As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: net4[:]},
	}
}

func netipMask(bits int) []byte {
	m := make([]byte, 4)
	for i := 0; i < bits; i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}

// ctEstablished matches ct state established,related.
func ctEstablished() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{
			SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0),
		},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

// inInternetSet matches iifname in @internet_ifaces.
func inInternetSet(s *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID},
	}
}

// notTCPOrUDP matches a packet that is neither TCP nor UDP.
func notTCPOrUDP() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
	}
}

// dportNot matches a TCP or UDP packet whose destination port is not port
// (after notTCPOrUDP dropped the others).
func dportNot(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	}
}

func verdict(k expr.VerdictKind) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: k}}
}
