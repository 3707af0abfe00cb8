//go:build linux

package network

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// CutSetName is the nftables set of host veth names whose sandboxes are cut
// off: every packet from or to such an interface is dropped, whatever the
// other rules say (issue 24).
const CutSetName = "cut_ifaces"

// chainOutput is the chain that cuts the host's own packets to a cut sandbox.
const chainOutput = "output"

func newCutSet(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: CutSetName, KeyType: nftables.TypeIFName, KeyByteOrder: binaryutil.NativeEndian}
}

// Cut makes sandbox id in slot unreachable at once, both ways: one nftables
// batch adds its host veth to the cut set, and the rules at the head of the
// input, forward and output chains drop (or, for the host's own TCP, reset)
// every packet from or to it, established flows included. It makes no
// rtnetlink call: deleting the veth waits on the kernel's rtnl lock, which
// takes up to seconds on a busy host, so Teardown does that later, and only
// then takes the veth out of the set (the slot, and with it the veth name and
// address, is not handed out again before Teardown returned). A negative slot
// (unknown) cuts nothing.
func (m *Manager) Cut(ctx context.Context, id string, slot int) error {
	if slot < 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ep, err := m.EndpointFor(id, slot)
	if err != nil {
		return err
	}
	return m.fw.setCut(ep.HostIf, true)
}

// cutConn is the netlink connection the cut set's updates go through,
// opened once and kept (a connection per update cost a socket, its bind
// and its close: system calls that under load each wait for a core, on
// the kill's answer path). mu serialises the updates: nftables batches
// them one at a time per namespace anyway.
type cutConn struct {
	mu sync.Mutex
	c  *nftables.Conn // nil until the first update, and after one failed
}

// setCut adds ifname to the cut set or removes it. Removing a missing
// element is not an error.
func (f *firewall) setCut(ifname string, cut bool) error {
	cc := &f.cutc
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.c == nil {
		c, err := nftables.New(nftables.AsLasting())
		if err != nil {
			return fmt.Errorf("opening nftables: %w", err)
		}
		cc.c = c
	}
	c := cc.c
	elems := []nftables.SetElement{{Key: ifnameKey(ifname)}}
	var err error
	if cut {
		err = c.SetAddElements(f.cut, elems)
	} else {
		err = c.SetDeleteElements(f.cut, elems)
	}
	if err == nil {
		err = c.Flush()
		if !cut && errors.Is(err, unix.ENOENT) {
			return nil
		}
	}
	if err != nil {
		// Replies of a failed batch may still be queued on the socket:
		// the next update opens a new one.
		_ = c.CloseLasting()
		cc.c = nil
		return fmt.Errorf("updating set %s (%s cut=%v): %w", CutSetName, ifname, cut, err)
	}
	return nil
}

// installCut adds the cut set (holding keep) and the rules that enforce it
// to the batch c. It must run before any other rule is added to input and
// forward, so that the cut rules come first.
func (f *firewall) installCut(c *nftables.Conn, input, forward *nftables.Chain, keep []string) error {
	var elems []nftables.SetElement
	for _, n := range keep {
		elems = append(elems, nftables.SetElement{Key: ifnameKey(n)})
	}
	set := *f.cut // AddSet assigns a transaction id; keep f.cut untouched
	if err := c.AddSet(&set, elems); err != nil {
		return fmt.Errorf("adding set %s: %w", CutSetName, err)
	}
	accept := nftables.ChainPolicyAccept
	output := c.AddChain(&nftables.Chain{
		Name: chainOutput, Table: f.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityFilter - 10),
		Policy: &accept,
	})
	rule := func(ch *nftables.Chain, exprs ...expr.Any) {
		c.AddRule(&nftables.Rule{Table: f.table, Chain: ch, Exprs: exprs})
	}
	in := func(key expr.MetaKey) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: key, Register: 1},
			&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
		}
	}
	drop := &expr.Verdict{Kind: expr.VerdictDrop}
	rule(input, append(in(expr.MetaKeyIIFNAME), drop)...)
	rule(forward, append(in(expr.MetaKeyIIFNAME), drop)...)
	rule(forward, append(in(expr.MetaKeyOIFNAME), drop)...)
	// The host's own TCP gets a reset: a dial or an open stream to the
	// sandbox fails at once instead of hanging in retransmissions.
	rule(output, append(in(expr.MetaKeyOIFNAME),
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Reject{Type: unix.NFT_REJECT_TCP_RST})...)
	rule(output, append(in(expr.MetaKeyOIFNAME), drop)...)
	return nil
}

// keepMembers returns the members of set s of the previous table whose veth
// (with our prefix) still exists.
func (f *firewall) keepMembers(s *nftables.Set) ([]string, error) {
	prev, err := f.currentMembers(s)
	if err != nil {
		return nil, err
	}
	var keep []string
	for _, n := range prev {
		if !strings.HasPrefix(n, f.ifPrefix) {
			continue
		}
		if _, err := netlink.LinkByName(n); err == nil {
			keep = append(keep, n)
		}
	}
	return keep, nil
}
