//go:build linux

package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/approval"
	"github.com/airlock-sandbox/airlock/internal/audit"
)

// The approval hold (issue 28 part 3). A sandbox with a hook (Egress.Hold)
// has, in its egress chain after allowOut and its specific denyOut entries:
//
//	ip daddr @ap_<veth> accept                       approved (remembered) addresses
//	meta l4proto tcp ip daddr @apd_<veth> reject with tcp reset   denied ones
//	meta l4proto tcp ct state established,related accept          connections the hook let through
//	meta l4proto tcp ct state new NFQUEUE num <Config.ApprovalQueue>
//	meta l4proto tcp drop
//
// then its catch-all denyOut entries (0.0.0.0/0), which still apply to
// what is not TCP. Already-allowed destinations are accepted before the
// queue rule, so they never reach it. The daemon reads the queue: for each
// first packet of a new connection it asks the hook (approval.Broker, keyed
// by destination, so a retransmitted SYN joins the pending question), then
// adds the address to @ap or @apd (with the remembered duration as the
// element's timeout, or a short one for an answer "once", which its SYN
// retransmits meet) and answers NF_REPEAT: the packet runs the forward
// chain again and meets the new element, so a deny is a TCP reset, seen by
// the sandbox as "connection refused" at once.
//
// The kernels of the development machines have no nft `queue` statement
// (CONFIG_NFT_QUEUE unset) but the xtables NFQUEUE target through
// nft_compat, which every kernel with NFT_QUEUE has too: the rule uses the
// xt target. Its bypass flag is off and the queue is bound without
// fail-open: with no daemon reading, held packets are dropped (fail closed).

// Set name prefixes (+ host veth name).
const (
	approvedSetPrefix = "ap_"
	deniedSetPrefix   = "apd_"
)

// denyOnceFor is how long a deny "once" stays in @apd: long enough for the
// repeated packet and the SYN retransmits already sent to meet it.
const denyOnceFor = 3 * time.Second

// allowOnceFor is how long an allow "once" stays in @ap: a connection is
// "new" to conntrack until its reply comes, so a SYN retransmitted after
// the verdict would otherwise be queued, and asked about, again.
const allowOnceFor = 2 * time.Second

func approvedSet(t *nftables.Table, ifname string) *nftables.Set {
	return &nftables.Set{Table: t, Name: approvedSetPrefix + ifname, KeyType: nftables.TypeIPAddr, HasTimeout: true}
}

func deniedSet(t *nftables.Table, ifname string) *nftables.Set {
	return &nftables.Set{Table: t, Name: deniedSetPrefix + ifname, KeyType: nftables.TypeIPAddr, HasTimeout: true}
}

func isTCP() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
	}
}

func ctNew() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitNEW), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

// nfqueueTarget is the xtables NFQUEUE target, revision 1 (queue number,
// one queue), through nft_compat: no bypass.
func nfqueueTarget(num uint16) expr.Any {
	info := xt.Unknown(append(binaryutil.NativeEndian.PutUint16(num), binaryutil.NativeEndian.PutUint16(1)...))
	return &expr.Target{Name: "NFQUEUE", Rev: 1, Info: &info}
}

// holdRules are the rules of ifname's egress chain that hold new TCP
// destinations (see above), without the catch-all denies.
func (f *firewall) holdRules(ifname string, queue uint16) [][]expr.Any {
	ap, apd := approvedSet(f.table, ifname), deniedSet(f.table, ifname)
	var rules [][]expr.Any
	with := func(r []expr.Any, l []expr.Any, v ...expr.Any) []expr.Any {
		out := append([]expr.Any(nil), r...)
		out = append(out, l...)
		return append(out, v...)
	}
	if l := f.auditLog(auditAllowed, "approval"); l != nil {
		rules = append(rules, with(learnedAccept(ap), l))
	}
	rules = append(rules, with(learnedAccept(ap), nil, &expr.Verdict{Kind: expr.VerdictAccept}))
	denied := with(isTCP(), learnedAccept(apd)) // learnedAccept: ipv4 daddr in set
	if l := f.auditLog(auditDenied, "approval"); l != nil {
		rules = append(rules, with(denied, l))
	}
	rules = append(rules, with(denied, nil, &expr.Reject{Type: unix.NFT_REJECT_TCP_RST}))
	rules = append(rules, with(isTCP(), ctEstablished(), &expr.Verdict{Kind: expr.VerdictAccept}))
	rules = append(rules, with(with(isTCP(), ipv4()), ctNew(), nfqueueTarget(queue)))
	rules = append(rules, with(isTCP(), nil, &expr.Verdict{Kind: expr.VerdictDrop}))
	return rules
}

// addHold adds, in batch c, ifname's approval sets (kept when they exist:
// remembered answers outlive a policy change) and the hold rules to ch,
// then e's catch-all denies.
func (f *firewall) addHold(c *nftables.Conn, ch *nftables.Chain, ifname string, e Egress, queue uint16) error {
	for _, s := range []*nftables.Set{approvedSet(f.table, ifname), deniedSet(f.table, ifname)} {
		if err := c.AddSet(s, nil); err != nil {
			return fmt.Errorf("adding set %s: %w", s.Name, err)
		}
	}
	for _, r := range f.holdRules(ifname, queue) {
		c.AddRule(&nftables.Rule{Table: f.table, Chain: ch, Exprs: r})
	}
	for _, r := range f.egressDenyRules(catchAll(e.Deny)) {
		c.AddRule(&nftables.Rule{Table: f.table, Chain: ch, Exprs: r})
	}
	return nil
}

// catchAll returns the entries of ps that name every address (0.0.0.0/0);
// specific returns the others. With a hook, a catch-all deny means "ask"
// for TCP.
func catchAll(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.Bits() == 0 {
			out = append(out, p)
		}
	}
	return out
}

func specific(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.Bits() != 0 {
			out = append(out, p)
		}
	}
	return out
}

// egressDenyRules are denyOut drop rules (with their audit rules).
func (f *firewall) egressDenyRules(ps []netip.Prefix) [][]expr.Any {
	return f.egressRules(Egress{Deny: ps})
}

// delHold removes ifname's approval sets; missing is fine. Its chain must
// no longer refer to them.
func (f *firewall) delHold(ifname string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	for _, s := range []*nftables.Set{approvedSet(f.table, ifname), deniedSet(f.table, ifname)} {
		c.DelSet(s)
		if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("removing set %s: %w", s.Name, err)
		}
	}
	return nil
}

// remember adds a to ifname's approved or denied set for d (0: no
// timeout, the sandbox's life).
func (f *firewall) rememberDecision(ifname string, a netip.Addr, allow bool, d time.Duration) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("opening nftables: %w", err)
	}
	s := deniedSet(f.table, ifname)
	if allow {
		s = approvedSet(f.table, ifname)
	}
	a4 := a.As4()
	if err := c.SetAddElements(s, []nftables.SetElement{{Key: a4[:], Timeout: d}}); err != nil {
		return fmt.Errorf("updating set %s: %w", s.Name, err)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("updating set %s: %w", s.Name, err)
	}
	return nil
}

// startApproval binds Config.ApprovalQueue and answers held packets until
// Close. Without a queue number or an Approver the hold is off (SetEgress
// refuses Egress.Hold then).
func (m *Manager) startApproval() error {
	if m.cfg.ApprovalQueue == 0 || m.cfg.Approver == nil {
		return nil
	}
	q, err := openNFQueue(m.cfg.ApprovalQueue)
	if err != nil {
		return err
	}
	m.nfq = q
	go m.readQueue(q)
	return nil
}

// HoldsApprovals reports whether the manager can hold connections for an
// approval hook.
func (m *Manager) HoldsApprovals() bool { return m.nfq != nil }

func (m *Manager) readQueue(q *nfQueue) {
	for {
		pkts, err := q.receive()
		if err != nil {
			if q.closed.Load() {
				return
			}
			m.log.Warn("reading the approval queue", "queue", q.num, "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for _, p := range pkts {
			go m.decide(q, p)
		}
	}
}

// decide asks about one held packet and gives its verdict.
func (m *Manager) decide(q *nfQueue, p queuedPacket) {
	ifname := ""
	if ifc, err := net.InterfaceByIndex(int(p.InIndex)); err == nil {
		ifname = ifc.Name
	}
	id := m.sandboxOfIface(ifname)
	if id == "" || p.Proto != unix.IPPROTO_TCP || !p.Dst.IsValid() {
		_ = q.verdict(p.ID, nfDrop)
		return
	}
	d := approval.Dest{Protocol: "tcp", Addr: p.Dst, Port: p.DPort}
	if m.cfg.DomainOf != nil {
		d.Domain = m.cfg.DomainOf(id, p.Dst)
	}
	if d.Domain == "" {
		d.Domain = m.learnedName(ifname, p.Dst)
	}
	a := m.cfg.Approver.Ask(context.Background(), id, d)
	v := uint32(nfRepeat)
	switch {
	case a.Allow:
		t := allowOnceFor
		if a.For != 0 {
			t = forSet(a.For)
		}
		err := m.fw.rememberDecision(ifname, p.Dst, true, t)
		if err != nil {
			m.log.Warn("remembering an approval", "sandbox", id, "err", err)
			v = nfAccept
		}
	default:
		t := denyOnceFor
		if a.For != 0 {
			t = forSet(a.For)
		}
		if err := m.fw.rememberDecision(ifname, p.Dst, false, t); err != nil {
			m.log.Warn("recording a denial", "sandbox", id, "err", err)
			v = nfDrop
		}
	}
	if err := q.verdict(p.ID, v); err != nil {
		m.log.Warn("approval verdict", "sandbox", id, "err", err)
	}
	m.noteApproval(id, d, a)
}

func forSet(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d
}

// noteApproval records a decision in the sandbox's egress audit log and
// tells Config.ApprovalObserver (the activity feed).
func (m *Manager) noteApproval(id string, d approval.Dest, a approval.Answer) {
	dec := audit.Denied
	if a.Allow {
		dec = audit.Allowed
	}
	rule := fmt.Sprintf("approval by %s after %d ms", a.By, a.Wait.Milliseconds())
	if d.Domain != "" {
		rule += " (" + d.Domain + ")"
	}
	m.audit.Add(id, audit.Entry{Time: time.Now(), Kind: KindApproval, Decision: dec, Rule: rule,
		Protocol: "tcp", Dst: d.Addr, Port: d.Port, Name: d.Domain})
	if m.cfg.ApprovalObserver != nil {
		m.cfg.ApprovalObserver(id, a)
	}
}

// KindApproval is the egress audit kind of an approval decision.
const KindApproval = "approval"

// closeApproval unbinds the queue (Close).
func (m *Manager) closeApproval() {
	if m.nfq != nil {
		_ = m.nfq.Close()
	}
}

// forgetApproval drops what the Approver remembers of sandbox id
// (Teardown), when it can.
func (m *Manager) forgetApproval(id string) {
	if f, ok := m.cfg.Approver.(interface{ Forget(id string) }); ok {
		f.Forget(id)
	}
}
