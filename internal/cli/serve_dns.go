package cli

import (
	"fmt"
	"hash/fnv"

	"github.com/spf13/pflag"

	"github.com/airlock-sandbox/airlock/internal/dnsfilter"
)

// egressFlags are the `airlock serve` flags of the DNS filter that enforces
// domain rules (allowOut/denyOut names) and of the egress audit log.
type egressFlags struct {
	upstreams  []string
	auditGroup int
}

func addEgressFlags(f *pflag.FlagSet, d *egressFlags) {
	f.StringSliceVar(&d.upstreams, "dns-upstream", dnsfilter.HostResolvers("/etc/resolv.conf"),
		"resolvers (ip or ip:port) that the DNS filter of sandboxes with domain rules forwards allowed queries to (default: the host's /etc/resolv.conf)")
	f.IntVar(&d.auditGroup, "audit-nflog-group", 0,
		"NFLOG group for the egress audit log of connections (1-65535; default derived from --net-prefix, -1 turns it off; two daemons on a host need different groups)")
}

// group returns the NFLOG group to use with net prefix prefix.
func (d egressFlags) group(prefix string) (uint16, error) {
	switch {
	case d.auditGroup == -1:
		return 0, nil
	case d.auditGroup == 0:
		return defaultAuditGroup(prefix), nil
	case d.auditGroup < 1 || d.auditGroup > 65535:
		return 0, fmt.Errorf("invalid --audit-nflog-group %d: want 1..65535 or -1", d.auditGroup)
	}
	return uint16(d.auditGroup), nil
}

// defaultAuditGroup derives a group from the net prefix (which already has
// to differ between daemons on one host), in 1000..60999.
func defaultAuditGroup(prefix string) uint16 {
	h := fnv.New32a()
	h.Write([]byte(prefix))
	return uint16(1000 + h.Sum32()%60000)
}
