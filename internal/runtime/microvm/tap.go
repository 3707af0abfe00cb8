//go:build linux

package microvm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/helperenv"
)

// TapName is the TAP device the VMM attaches to in the sandbox's netns.
const TapName = "tap0"

// guestNet is the address internal/network gave the sandbox (on eth0 in its
// netns), which the guest takes over.
type guestNet struct {
	Addr    netip.Prefix
	Gateway netip.Addr
	MAC     net.HardwareAddr
}

// cmdline returns the kernel's ip= argument (CONFIG_IP_PNP) for n.
func (n guestNet) cmdline() string {
	mask := net.CIDRMask(n.Addr.Bits(), 32)
	return fmt.Sprintf("ip=%s::%s:%s::eth0:off", n.Addr.Addr(), n.Gateway, net.IP(mask))
}

// moveScript runs inside the sandbox's netns: it creates the VMM's TAP
// (owned by the VMM's unprivileged user), joins it to eth0 with two tc
// mirred redirects (every frame in on one leaves on the other, so the guest
// uses eth0's MAC and address and the host side sees no difference from
// gVisor), then takes the address off eth0: from now on only the guest
// answers for it.
const moveScript = `set -e
ip tuntap add dev ` + TapName + ` mode tap user "$1" group "$2"
ip link set ` + TapName + ` up
tc qdisc add dev eth0 ingress
tc filter add dev eth0 parent ffff: protocol all u32 match u32 0 0 action mirred egress redirect dev ` + TapName + `
tc qdisc add dev ` + TapName + ` ingress
tc filter add dev ` + TapName + ` parent ffff: protocol all u32 match u32 0 0 action mirred egress redirect dev eth0
ip addr flush dev eth0
`

// setupTap reads eth0's address, MAC and default gateway in the netns at
// nsPath and hands the link over to a TAP for the VMM running as uid:gid.
func (r *Runtime) setupTap(ctx context.Context, nsPath string, uid, gid int) (guestNet, error) {
	var g guestNet
	out, err := r.inNetNS(ctx, nsPath, "ip", "-j", "addr", "show", "dev", "eth0")
	if err != nil {
		return g, err
	}
	var links []struct {
		Address  string `json:"address"`
		AddrInfo []struct {
			Family    string `json:"family"`
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return g, fmt.Errorf("parsing eth0 of %s: %v (%s)", nsPath, err, bytes.TrimSpace(out))
	}
	if g.MAC, err = net.ParseMAC(links[0].Address); err != nil {
		return g, fmt.Errorf("eth0 MAC in %s: %w", nsPath, err)
	}
	for _, a := range links[0].AddrInfo {
		if a.Family != "inet" {
			continue
		}
		if addr, err := netip.ParseAddr(a.Local); err == nil {
			g.Addr = netip.PrefixFrom(addr, a.PrefixLen)
		}
	}
	if !g.Addr.IsValid() {
		return g, fmt.Errorf("eth0 in %s has no IPv4 address", nsPath)
	}
	out, err = r.inNetNS(ctx, nsPath, "ip", "-j", "-4", "route", "show", "default")
	if err != nil {
		return g, err
	}
	var routes []struct {
		Gateway string `json:"gateway"`
	}
	if err := json.Unmarshal(out, &routes); err != nil || len(routes) == 0 {
		return g, fmt.Errorf("no default route in %s: %v", nsPath, err)
	}
	if g.Gateway, err = netip.ParseAddr(routes[0].Gateway); err != nil {
		return g, fmt.Errorf("default gateway in %s: %w", nsPath, err)
	}
	if _, err := r.inNetNS(ctx, nsPath, "sh", "-c", moveScript, "sh", strconv.Itoa(uid), strconv.Itoa(gid)); err != nil {
		return g, fmt.Errorf("attaching TAP: %w", err)
	}
	return g, nil
}

// removeTap deletes the TAP (best effort: the netns may already be gone,
// which takes the TAP with it).
func (r *Runtime) removeTap(ctx context.Context, nsPath string) {
	_, _ = r.inNetNS(ctx, nsPath, "ip", "link", "del", TapName)
}

// inNetNS runs a command inside the network namespace at nsPath.
func (r *Runtime) inNetNS(ctx context.Context, nsPath string, args ...string) ([]byte, error) {
	full := append([]string{"--net=" + nsPath, "--"}, args...)
	cmd := helperenv.Command(ctx, r.nsenter, full...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("nsenter %s %v: %w: %s", nsPath, args, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}
