package cli

import (
	"github.com/spf13/pflag"

	"github.com/airlock-sandbox/airlock/internal/dnsfilter"
)

// dnsFlags are the `airlock serve` flags of the DNS filter that enforces
// domain rules (allowOut/denyOut names).
type dnsFlags struct {
	upstreams []string
}

func addDNSFlags(f *pflag.FlagSet, d *dnsFlags) {
	f.StringSliceVar(&d.upstreams, "dns-upstream", dnsfilter.HostResolvers("/etc/resolv.conf"),
		"resolvers (ip or ip:port) that the DNS filter of sandboxes with domain rules forwards allowed queries to (default: the host's /etc/resolv.conf)")
}
