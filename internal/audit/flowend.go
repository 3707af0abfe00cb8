package audit

import (
	"net/netip"
	"time"
)

// FlowEnd is a sandbox connection that ended, with what it carried
// (internal/network reads it from conntrack's destroy events). It is not an
// Entry of the egress audit log: that log records decisions, and a flow
// that ends was decided on when it began.
type FlowEnd struct {
	Time     time.Time // when conntrack forgot the flow
	Protocol string    // "tcp", "udp", "icmp", or the protocol number
	Dst      netip.Addr
	Port     uint16 // 0 without ports
	// BytesOut and PacketsOut: sandbox to destination; BytesIn and
	// PacketsIn: back. IP-level bytes (headers included).
	BytesOut, BytesIn     uint64
	PacketsOut, PacketsIn uint64
	// Duration is 0 when the kernel gave no start time.
	Duration time.Duration
}

// EndObserver is an Observer that also takes ended flows (the activity
// feed's "egress.end").
type EndObserver interface {
	EgressEnd(id string, f FlowEnd)
}
