package dnsfilter

import (
	"bufio"
	"net/netip"
	"os"
	"strings"
)

// HostResolvers returns the IPv4 nameservers of the resolv.conf at path,
// loopback ones included (the filter runs on the host, so a local stub
// resolver is fine); nil when there are none or the file is unreadable.
func HostResolvers(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		if a, err := netip.ParseAddr(fields[1]); err == nil && a.Is4() && !a.IsUnspecified() {
			out = append(out, a.String())
		}
	}
	return out
}
