//go:build linux

package network

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"net/netip"
	"os/exec"
	"strings"
)

// The root tests' own names, fresh for every run of the test binary, so
// they run beside a daemon (whose --net-prefix does not start with
// runPrefixHead, and whose --subnet is routed on the host or outside
// runRange) and beside another run of themselves.
//
//   - runPrefix(id) is runPrefixHead + a random 4-character run tag + id
//     (2 characters): all of one length, so no test's interface prefix is
//     the start of another's (the firewall matches "<prefix>*"), and none
//     is the start of a daemon's.
//   - runSubnet(i) is the i-th /24 of a /20 picked at random in runRange
//     among those the host has no route into.
//
// The stand-in outside networks (makeOutsideNS) keep their fixed names
// ("x…", which no daemon's prefix starts with) and ranges.

const (
	runPrefixHead = "zt"
	runRange      = "10.200.0.0/13"
	runBlockBits  = 20
)

var (
	runTag   = randomTag(4)
	runBlock = pickRunBlock()
)

// runPrefix is this run's net prefix for the test named by id (two
// lowercase letters or digits, one per test).
func runPrefix(id string) string {
	if len(id) != 2 {
		panic("runPrefix: id must be 2 characters: " + id)
	}
	return runPrefixHead + runTag + id
}

// runSubnet is this run's i-th /24 (0..15), as a string.
func runSubnet(i int) string {
	if i < 0 || i >= 1<<(24-runBlockBits) {
		panic(fmt.Sprintf("runSubnet(%d): out of the run's /%d", i, runBlockBits))
	}
	a := runBlock.Addr().As4()
	a[2] += byte(i)
	return netip.PrefixFrom(netip.AddrFrom4(a), 24).String()
}

func randomTag(n int) string {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		k, err := rand.Int(rand.Reader, big.NewInt(int64(len(chars))))
		if err != nil {
			panic(err)
		}
		b[i] = chars[k.Int64()]
	}
	return string(b)
}

// pickRunBlock picks a /20 of runRange that no host route (any table)
// overlaps; after 64 tries, the last one.
func pickRunBlock() netip.Prefix {
	routes := hostRoutes()
	r := netip.MustParsePrefix(runRange)
	n := int64(1) << (runBlockBits - r.Bits())
	var p netip.Prefix
	for try := 0; try < 64; try++ {
		k, err := rand.Int(rand.Reader, big.NewInt(n))
		if err != nil {
			panic(err)
		}
		a := r.Addr().As4()
		off := uint32(k.Int64()) << (32 - runBlockBits)
		a[1] += byte(off >> 16)
		a[2] += byte(off >> 8)
		p = netip.PrefixFrom(netip.AddrFrom4(a), runBlockBits)
		free := true
		for _, rt := range routes {
			free = free && !rt.Overlaps(p)
		}
		if free {
			return p
		}
	}
	return p
}

// hostRoutes are the IPv4 destinations of the host's routes, all tables
// (a daemon routes each sandbox's /30 and holds its own addresses there);
// none when `ip` cannot list them.
func hostRoutes() []netip.Prefix {
	out, err := exec.Command("ip", "-4", "-o", "route", "show", "table", "all").Output()
	if err != nil {
		return nil
	}
	var ps []netip.Prefix
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 {
			switch f[0] {
			case "local", "broadcast", "unicast", "multicast", "unreachable", "prohibit", "blackhole", "throw", "anycast":
				f = f[1:]
			}
		}
		if len(f) == 0 || f[0] == "default" {
			continue
		}
		if p, err := netip.ParsePrefix(f[0]); err == nil {
			ps = append(ps, p.Masked())
		} else if a, err := netip.ParseAddr(f[0]); err == nil && a.Is4() {
			ps = append(ps, netip.PrefixFrom(a, 32))
		}
	}
	return ps
}
