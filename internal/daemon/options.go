package daemon

import (
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/netip"
	"time"

	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Limits are the per-sandbox resource limits (the --default-* and --max-*
// flags, --disk-reserve-mb).
type Limits struct {
	CPU, MemoryMB, DiskMB, PIDs, OpenFiles int
	MaxCPU, MaxMemoryMB, MaxDiskMB         int
	DiskReserveMB                          int
}

// apply sets the limit fields of cfg.
func (l Limits) apply(cfg *sandbox.Config) {
	cfg.DefaultCPUCount = l.CPU
	cfg.DefaultMemoryMB = l.MemoryMB
	cfg.DefaultDiskSizeMB = l.DiskMB
	cfg.DiskReserveMB = l.DiskReserveMB
	if l.DiskReserveMB == 0 {
		cfg.DiskReserveMB = -1 // 0 asked for explicitly: no reserve
	}
	cfg.Limits = sandbox.LimitConfig{
		DefaultPIDs:      l.PIDs,
		DefaultOpenFiles: l.OpenFiles,
		MaxCPUCount:      l.MaxCPU,
		MaxMemoryMB:      l.MaxMemoryMB,
		MaxDiskSizeMB:    l.MaxDiskMB,
	}
}

// Egress configures the operator's deny list, the DNS filter that enforces
// domain rules (allowOut/denyOut names) and the egress audit log.
type Egress struct {
	// DenyOut is --deny-out: IPv4 ranges no sandbox reaches, whatever its
	// allowOut says ("none" or an empty value: no list). Nil means
	// network.DefaultDenyOut.
	DenyOut []string
	// DenyOutExcept is --deny-out-except: holes in DenyOut for every
	// sandbox (an internal package mirror); each sandbox's own policy still
	// applies there.
	DenyOutExcept []string
	// DNSUpstreams are the resolvers allowed queries go to (--dns-upstream).
	DNSUpstreams []string
	// ProxyUpstreamCA is --egress-proxy-upstream-ca: a PEM file of CAs the
	// egress proxy trusts for upstream servers besides the system roots
	// (tests: their own HTTPS server; an operator's internal CA).
	ProxyUpstreamCA string
	// ProxyAllowPrivate is --egress-proxy-allow-private: a sandbox's
	// network.egressProxy may be a private or internal address (E2B
	// refuses those; tests and an operator's own proxy need them).
	ProxyAllowPrivate bool
	// AuditGroup is --audit-nflog-group: 0 derives it from the net prefix,
	// -1 turns the connection audit off.
	AuditGroup int
	// ActivityMaxEntries and ActivityMaxAge are --activity-max-entries
	// (0: the activity feed is off) and --activity-max-age.
	ActivityMaxEntries int
	ActivityMaxAge     time.Duration
	// ApprovalQueue is --approval-queue: the NFQUEUE number of the egress
	// approval hold (approval.go); 0 derives it from the net prefix, -1
	// turns network.approval off.
	ApprovalQueue int
}

// group returns the NFLOG group to use with net prefix prefix.
func (e Egress) group(prefix string) (uint16, error) {
	switch {
	case e.AuditGroup == -1:
		return 0, nil
	case e.AuditGroup == 0:
		return defaultAuditGroup(prefix), nil
	case e.AuditGroup < 1 || e.AuditGroup > 65535:
		return 0, fmt.Errorf("invalid --audit-nflog-group %d: want 1..65535 or -1", e.AuditGroup)
	}
	return uint16(e.AuditGroup), nil
}

// defaultAuditGroup derives a group from the net prefix (which already has
// to differ between daemons on one host), in 1000..60999.
func defaultAuditGroup(prefix string) uint16 {
	h := fnv.New32a()
	h.Write([]byte(prefix))
	return uint16(1000 + h.Sum32()%60000)
}

// denyOut parses --deny-out and --deny-out-except. It warns (on log) about
// exceptions that change nothing: outside every denied range, or inside a
// range Airlock always blocks.
func (e Egress) denyOut(log *slog.Logger) (deny, except []netip.Prefix, err error) {
	deny = network.DefaultDenyOut
	if e.DenyOut != nil {
		if deny, err = network.ParseDenyOut("deny-out", e.DenyOut); err != nil {
			return nil, nil, err
		}
	}
	if except, err = network.ParseDenyOut("deny-out-except", e.DenyOutExcept); err != nil {
		return nil, nil, err
	}
	for _, x := range except {
		inside := false
		for _, d := range deny {
			inside = inside || x.Overlaps(d)
		}
		if !inside {
			log.Warn("--deny-out-except entry is outside every --deny-out range: it changes nothing", "entry", x)
		}
		if b, ok := network.AlwaysBlocked(x); ok {
			log.Warn("--deny-out-except entry overlaps a range sandboxes never reach: it stays blocked there", "entry", x, "blocked", b)
		}
	}
	return deny, except, nil
}
