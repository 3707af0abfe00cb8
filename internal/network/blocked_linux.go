//go:build linux

package network

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// BlockedSetName is the nftables set of addresses no sandbox reaches
// (Config.BlockedAddrs): the cluster's nodes, store and artifact store. The
// forward chain drops traffic to it right after the always-blocked ranges,
// before the operator deny list (and its exceptions) and the per-sandbox
// policy, so that nothing opens it:
//
//	iifname "<prefix>*" ip daddr @blocked_addrs [log] drop
const BlockedSetName = "blocked_addrs"

// blockedRule names the drop in the egress audit log.
const blockedRule = "cluster address"

func newBlockedSet(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: BlockedSetName, KeyType: nftables.TypeIPAddr}
}

// blockedElems encodes addrs (IPv4 only; IPv6 is never forwarded) as set
// elements, without duplicates.
func blockedElems(addrs []netip.Addr) []nftables.SetElement {
	var keep []netip.Addr
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() && !slices.Contains(keep, a) {
			keep = append(keep, a)
		}
	}
	elems := make([]nftables.SetElement, len(keep))
	for i, a := range keep {
		b := a.As4()
		elems[i] = nftables.SetElement{Key: b[:]}
	}
	return elems
}

// daddrInSet matches an IPv4 packet whose destination is in s.
func daddrInSet(s *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID},
	}
}

// SetBlockedAddrs replaces the set of addresses no sandbox reaches
// (Config.BlockedAddrs) with addrs, atomically. IPv6 addresses are
// ignored: no IPv6 packet from a sandbox is forwarded.
func (m *Manager) SetBlockedAddrs(addrs []netip.Addr) error {
	m.fw.blockedMu.Lock()
	defer m.fw.blockedMu.Unlock()
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	c.FlushSet(m.fw.blocked)
	if elems := blockedElems(addrs); len(elems) > 0 {
		if err := c.SetAddElements(m.fw.blocked, elems); err != nil {
			return fmt.Errorf("updating set %s: %w", BlockedSetName, err)
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("updating set %s: %w", BlockedSetName, err)
	}
	m.fw.blockedAddrs = slices.Clone(addrs)
	return nil
}

// BlockedAddrs lists the set of addresses no sandbox reaches, as the
// kernel has it.
func (m *Manager) BlockedAddrs() ([]netip.Addr, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("opening nftables: %w", err)
	}
	elems, err := c.GetSetElements(m.fw.blocked)
	if err != nil {
		return nil, fmt.Errorf("reading set %s: %w", BlockedSetName, err)
	}
	out := make([]netip.Addr, 0, len(elems))
	for _, e := range elems {
		if a, ok := netip.AddrFromSlice(e.Key); ok {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}
