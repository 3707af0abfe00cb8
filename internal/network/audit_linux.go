//go:build linux

package network

import (
	"errors"
	"net/netip"
	"strings"
	"time"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/nflog"
)

// Egress audit (see internal/audit/doc.go, "Egress audit log"): every
// verdict rule on traffic leaving a sandbox is preceded by a copy of its
// match plus `ct state new log prefix "<a|d>|<rule>" group <AuditGroup>`,
// so the first packet of every flow (TCP SYN, first UDP datagram; a
// retransmitted SYN of a dropped connection again) reaches the daemon over
// NFLOG with the decision and the rule that made it. The reader maps the
// packet's input interface (the host veth) to the sandbox.

// Prefix decisions.
const (
	auditAllowed = "a"
	auditDenied  = "d"
	// auditLearned names the rule of addresses learned from DNS answers;
	// the reader replaces it with the name that opened the address.
	auditLearned = "allowOut (resolved name)"
)

// auditCopyRange is how much of a packet NFLOG copies: an IPv4 header with
// options plus the ports.
const auditCopyRange = 64

// maxLogPrefix is the kernel's limit for a log prefix (NF_LOG_PREFIXLEN-1).
const maxLogPrefix = 127

// auditLog returns `ct state new log prefix "decision|why" group G`, or nil
// when auditing is off.
func (f *firewall) auditLog(decision, why string) []expr.Any {
	if f.logGroup == 0 {
		return nil
	}
	prefix := decision + "|" + why
	if len(prefix) > maxLogPrefix {
		prefix = prefix[:maxLogPrefix]
	}
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{
			SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitNEW),
			Xor:  binaryutil.NativeEndian.PutUint32(0),
		},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Log{Key: 1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_PREFIX, Group: f.logGroup, Data: []byte(prefix)},
	}
}

// auditBindWait is how long startAudit retries a group that is bound: a
// daemon restarted right after being killed finds its predecessor's
// binding still there for a moment (the kernel releases it asynchronously).
const auditBindWait = 5 * time.Second

// startAudit binds the NFLOG group and records every logged flow until
// Close. Failing to bind (another daemon holds the group) only disables
// the connection audit.
func (m *Manager) startAudit() {
	if m.cfg.AuditGroup == 0 {
		return
	}
	c, err := nflog.Open(m.cfg.AuditGroup, auditCopyRange)
	for deadline := time.Now().Add(auditBindWait); errors.Is(err, unix.EPERM) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		c, err = nflog.Open(m.cfg.AuditGroup, auditCopyRange)
	}
	if err != nil {
		m.log.Warn("egress audit of connections disabled", "group", m.cfg.AuditGroup, "err", err)
		return
	}
	m.nflog = c
	go func() {
		err := c.Read(m.auditPacket, func(err error) {
			m.log.Warn("egress audit lost packets (burst)", "err", err)
		})
		if err != nil {
			m.log.Error("egress audit reader stopped", "err", err)
		}
	}()
}

// auditPacket records one logged packet.
func (m *Manager) auditPacket(p nflog.Packet) {
	decision, why, ok := strings.Cut(p.Prefix, "|")
	if !ok {
		return
	}
	flow, ok := nflog.ParseIPv4(p.Payload)
	if !ok {
		return
	}
	ifname := ""
	if l, err := netlink.LinkByIndex(int(p.InDev)); err == nil {
		ifname = l.Attrs().Name
	}
	id := m.sandboxOfIface(ifname)
	if id == "" {
		return // not ours, or gone already
	}
	if why == auditLearned {
		if name := m.learnedName(ifname, flow.Dst); name != "" {
			why = "allowOut " + name + " (resolved)"
		}
	}
	d := audit.Denied
	if decision == auditAllowed {
		d = audit.Allowed
	}
	m.audit.Add(id, audit.Entry{Time: p.Time, Kind: audit.KindConn, Decision: d, Rule: why,
		Protocol: flow.Protocol, Dst: flow.Dst, Port: flow.Port})
}

// EgressDropped is how many of sandbox id's oldest audit entries are no
// longer kept.
func (m *Manager) EgressDropped(id string) uint64 { return m.audit.Dropped(id) }

// remember maps a host veth to its sandbox (Setup, SetPolicy).
func (m *Manager) remember(ifname, id string) {
	m.ifMu.Lock()
	m.ifaces[ifname] = id
	m.ifMu.Unlock()
}

// forget drops what is known about a host veth (Teardown).
func (m *Manager) forget(ifname string) {
	m.ifMu.Lock()
	delete(m.ifaces, ifname)
	delete(m.learned, ifname)
	m.ifMu.Unlock()
}

// noteLearned records which rule opened addrs (for the audit log).
func (m *Manager) noteLearned(ifname, name string, addrs []netip.Addr) {
	m.ifMu.Lock()
	defer m.ifMu.Unlock()
	byAddr := m.learned[ifname]
	if byAddr == nil {
		byAddr = map[netip.Addr]string{}
		m.learned[ifname] = byAddr
	}
	for _, a := range addrs {
		byAddr[a] = name
	}
}

func (m *Manager) learnedName(ifname string, a netip.Addr) string {
	m.ifMu.Lock()
	defer m.ifMu.Unlock()
	return m.learned[ifname][a]
}

// sandboxOfIface returns the sandbox behind a host veth: from the map, or
// (after a daemon restart) by finding the named namespace its peer is in.
func (m *Manager) sandboxOfIface(ifname string) string {
	if !strings.HasPrefix(ifname, m.fw.ifPrefix) {
		return ""
	}
	m.ifMu.Lock()
	id, ok := m.ifaces[ifname]
	m.ifMu.Unlock()
	if ok {
		return id
	}
	link, err := netlink.LinkByName(ifname)
	if err != nil || link.Attrs().NetNsID < 0 {
		return ""
	}
	ids, err := m.ListNamespaces()
	if err != nil {
		return ""
	}
	for _, cand := range ids {
		ep, err := m.EndpointFor(cand, 0)
		if err != nil {
			continue
		}
		nsh, err := netns.GetFromPath(ep.NetNSPath)
		if err != nil {
			continue
		}
		nsid, err := netlink.GetNetNsIdByFd(int(nsh))
		nsh.Close()
		if err == nil && nsid == link.Attrs().NetNsID {
			m.remember(ifname, cand)
			return cand
		}
	}
	return ""
}
