//go:build linux

package network

import (
	"context"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Readdress puts the guest address and default route of sandbox id in slot
// back on eth0 inside its namespace, replacing whatever address is there.
//
// runsc --network=sandbox moves eth0's addresses into gVisor's netstack and
// removes them from the namespace, so a later `runsc restore` in the same
// (or, for a fork, another) namespace would find an interface without
// addresses and start without eth0. Call it before every restore.
func (m *Manager) Readdress(ctx context.Context, id string, slot int) error {
	ep, err := m.EndpointFor(id, slot)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	nsh, err := netns.GetFromPath(ep.NetNSPath)
	if err != nil {
		return fmt.Errorf("opening network namespace of %s: %w", id, err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		return fmt.Errorf("netlink handle in %s: %w", ep.NetNSPath, err)
	}
	defer h.Close()
	eth, err := h.LinkByName(GuestIfName)
	if err != nil {
		return fmt.Errorf("looking up %s in %s: %w", GuestIfName, ep.NetNSPath, err)
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return h.AddrList(eth, netlink.FAMILY_V4) })
	if err != nil {
		return fmt.Errorf("listing addresses in %s: %w", ep.NetNSPath, err)
	}
	for i := range addrs {
		if err := h.AddrDel(eth, &addrs[i]); err != nil {
			return fmt.Errorf("removing %s in %s: %w", addrs[i].IPNet, ep.NetNSPath, err)
		}
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: ep.GuestIP.AsSlice(), Mask: net.CIDRMask(ep.PrefixLen, 32)}}
	if err := h.AddrAdd(eth, addr); err != nil {
		return fmt.Errorf("adding %s in %s: %w", addr, ep.NetNSPath, err)
	}
	if err := h.LinkSetUp(eth); err != nil {
		return fmt.Errorf("bringing up %s in %s: %w", GuestIfName, ep.NetNSPath, err)
	}
	route := &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: ep.HostIP.AsSlice()}
	if err := h.RouteReplace(route); err != nil {
		return fmt.Errorf("setting default route via %s in %s: %w", ep.HostIP, ep.NetNSPath, err)
	}
	return nil
}
