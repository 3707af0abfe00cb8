//go:build linux

package vminit

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/airlock-sandbox/airlock/internal/guest"
)

// Headers of the daemon's POST /freeze to a forked microVM (a clone of a
// saved VM, still on its parent's address): the child's own address
// ("10.0.0.6/30") and gateway. The agent answers, then moves eth0.
const (
	AddrHeader    = guest.HeaderGuestAddr
	GatewayHeader = guest.HeaderGuestGateway
)

// ParseAddress checks the values of AddrHeader and GatewayHeader.
func ParseAddress(addr, gw string) (netip.Prefix, netip.Addr, error) {
	p, err := netip.ParsePrefix(addr)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, netip.Addr{}, fmt.Errorf("bad %s %q", AddrHeader, addr)
	}
	g, err := netip.ParseAddr(gw)
	if err != nil || !g.Is4() || !p.Masked().Contains(g) {
		return netip.Prefix{}, netip.Addr{}, fmt.Errorf("bad %s %q (must be inside %s)", GatewayHeader, gw, p.Masked())
	}
	return p, g, nil
}

// Readdress replaces eth0's IPv4 addresses with addr and its default route
// with one via gw (netlink). delay lets the answer to the request that
// asked for it leave on the old address first.
func Readdress(addr netip.Prefix, gw netip.Addr, delay time.Duration) error {
	time.Sleep(delay)
	link, err := netlink.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("eth0: %w", err)
	}
	old, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("listing eth0 addresses: %w", err)
	}
	for _, a := range old {
		if err := netlink.AddrDel(link, &a); err != nil {
			return fmt.Errorf("removing %s from eth0: %w", a.IPNet, err)
		}
	}
	ipn := &net.IPNet{IP: addr.Addr().AsSlice(), Mask: net.CIDRMask(addr.Bits(), 32)}
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: ipn}); err != nil {
		return fmt.Errorf("adding %s to eth0: %w", addr, err)
	}
	route := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw.AsSlice(), Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}}
	if err := netlink.RouteReplace(route); err != nil {
		return fmt.Errorf("default route via %s: %w", gw, err)
	}
	return nil
}
