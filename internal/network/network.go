package network

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/jsonlog"
)

// DefaultSubnet is the pool sandbox addresses are carved from: every sandbox
// gets a /30 (host side .1, sandbox side .2 within its block).
const DefaultSubnet = "10.77.0.0/16"

// Config of the network manager.
type Config struct {
	Subnet netip.Prefix // pool, default DefaultSubnet
	// NamePrefix prefixes netns and host veth names; default "airlock"/"al".
	// Tests use a different prefix so they never touch a running daemon.
	NamePrefix string
	// DNSUpstreams are the resolvers ("ip" or "ip:port") the DNS filter of
	// sandboxes with domain rules forwards to; without them domain rules
	// are refused.
	DNSUpstreams []string
	// DNSPort is the port the DNS filter listens on at each sandbox's host
	// address; default 53.
	DNSPort uint16
	// InterceptPort, when not 0, is the port the egress proxy listens on
	// at each sandbox's host address: connections of sandboxes with network
	// rules to their ruled domains' addresses are steered there
	// (intercept_linux.go).
	InterceptPort uint16
	// SocksPort, when not 0, is the port the SOCKS relay listens on at
	// each sandbox's host address: the TCP of sandboxes with an
	// egressProxy is steered there (socks_linux.go).
	SocksPort uint16
	// AuditGroup is the NFLOG group the firewall logs new outbound flows
	// to and the manager reads them from (the egress audit log); 0 turns
	// connection auditing off. Two daemons on a host need distinct groups.
	AuditGroup uint16
	// AuditLogs, when set, keeps each sandbox's egress audit log on disk
	// as well (jsonlog name "<id>.egress"), so it survives a restart.
	AuditLogs *jsonlog.Store
	// AuditObserver, when set, sees every egress audit entry and every
	// sandbox's teardown (the activity feed, internal/activity).
	AuditObserver audit.Observer
	// DenyOut is the operator's deny list (--deny-out, denyout.go):
	// destinations no sandbox reaches, whatever its allowOut says. nil
	// means DefaultDenyOut; an empty, non-nil list turns it off.
	DenyOut []netip.Prefix
	// DenyOutExcept are holes in DenyOut (--deny-out-except), e.g. an
	// internal package mirror. They only lift the operator's deny: each
	// sandbox's own policy (internet switch, allowOut/denyOut) still
	// decides whether it reaches them.
	DenyOutExcept []netip.Prefix
	// Resolvers are the nameservers written into sandboxes' resolv.conf:
	// DNS (UDP and TCP port 53) to them passes DenyOut, so a host whose
	// resolver has a private address keeps name resolution working.
	Resolvers []netip.Addr
	// BlockedAddrs are the cluster's own addresses (every node's advertise
	// address, the store's, the artifact store's): no sandbox reaches them,
	// whatever DenyOut, DenyOutExcept or its allowOut say
	// (blocked_linux.go). Manager.SetBlockedAddrs replaces them later.
	BlockedAddrs []netip.Addr
	// ApprovalConfig: the approval hold (approval.go, approval_linux.go).
	ApprovalConfig
}

// Options for one sandbox.
type Options struct {
	AllowInternet bool
	// Egress refines AllowInternet with allowOut/denyOut (egress_linux.go).
	Egress Egress
	// Intercept are the sandbox's ruled domains (network.rules, lower
	// case): the DNS filter steers their answers' addresses to the egress
	// proxy (intercept_linux.go). Needs Config.InterceptPort.
	Intercept []string
	// EgressProxy: the sandbox's TCP goes through its SOCKS5 egressProxy
	// (socks_linux.go), nothing else leaves. Needs Config.SocksPort and
	// the DNS filter.
	EgressProxy bool
}

// egress is o.Egress with Relayed set from o.EgressProxy.
func (o Options) egress() Egress {
	e := o.Egress
	e.Relayed = o.EgressProxy
	return e
}

// needsDNS reports whether the sandbox's DNS goes through the filter.
func (o Options) needsDNS() bool {
	return o.Egress.HasDomains() || len(o.Intercept) > 0 || o.EgressProxy
}

// intercepted reports whether name is one of o's ruled domains.
func (o Options) intercepted(name string) bool {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	for _, d := range o.Intercept {
		if d == name {
			return true
		}
	}
	return false
}

// Endpoint is what a sandbox's network looks like once set up.
type Endpoint struct {
	ID        string
	Slot      int
	NetNSPath string     // e.g. /var/run/netns/airlock-<id>
	HostIf    string     // host-side veth name
	HostIP    netip.Addr // gateway address on the host side
	GuestIP   netip.Addr // sandbox address (the agent listens here)
	PrefixLen int
}

// SlotAddrs returns the host and guest address of slot n within subnet.
func SlotAddrs(subnet netip.Prefix, slot int) (host, guest netip.Addr, err error) {
	bits := subnet.Addr().BitLen() - subnet.Bits()
	if bits < 2 || slot < 0 || (uint64(slot)+1)*4 > uint64(1)<<bits {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("slot %d does not fit in %s", slot, subnet)
	}
	a := subnet.Masked().Addr().As4()
	base := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	base += uint32(slot) * 4
	mk := func(v uint32) netip.Addr {
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	return mk(base + 1), mk(base + 2), nil
}
