//go:build linux

package network

import (
	"context"
	"fmt"

	"github.com/vishvananda/netlink"
)

// Cut makes sandbox id in slot unreachable at once: it deletes the host veth
// (its peer in the sandbox's namespace goes with it), so the guest address has
// no route any more and the sandbox reaches nothing. Teardown removes the
// rest later (firewall entries, resolver, the namespace); it does not mind the
// veth being gone. A negative slot (unknown) cuts nothing.
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
	link, err := netlink.LinkByName(ep.HostIf)
	if err != nil {
		if isLinkNotFound(err) {
			return nil
		}
		return fmt.Errorf("looking up veth %s: %w", ep.HostIf, err)
	}
	if err := checkPeerNS(link, ep); err != nil {
		return err
	}
	if err := netlink.LinkDel(link); err != nil && !isLinkNotFound(err) {
		return fmt.Errorf("deleting veth %s: %w", ep.HostIf, err)
	}
	return nil
}
