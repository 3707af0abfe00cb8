package sandbox

import (
	"bufio"
	"net/netip"
	"os"
	"strings"
)

// DefaultNameservers are used when the host has no usable resolver.
var DefaultNameservers = []string{"1.1.1.1", "8.8.8.8"}

// HostNameservers returns the non-loopback nameservers listed in the resolv.conf
// file at path, or DefaultNameservers when there are none (a loopback stub
// resolver such as systemd-resolved is unreachable from a sandbox).
func HostNameservers(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return append([]string(nil), DefaultNameservers...)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		addr, err := netip.ParseAddr(fields[1])
		if err != nil || addr.IsLoopback() || addr.IsUnspecified() || addr.IsLinkLocalUnicast() {
			continue
		}
		out = append(out, addr.String())
	}
	if len(out) == 0 {
		return append([]string(nil), DefaultNameservers...)
	}
	return out
}
