//go:build linux

package network

import (
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"github.com/ti-mo/netfilter"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/audit"
)

// Ended flows ("egress.end", issue 28 part 2). Sandbox traffic is forwarded
// (and masqueraded, or DNATed to the SOCKS relay, the interception proxy or
// the DNS filter) through the host's network namespace, so the host's
// conntrack sees every flow a sandbox opens. With accounting and
// timestamps on (net.netfilter.nf_conntrack_acct and
// nf_conntrack_timestamp, which the manager turns on at start; they count
// flows created from then on), conntrack's destroy event
// (NFNLGRP_CONNTRACK_DESTROY) carries the flow's original tuple, its byte
// and packet counters each way, and its start and stop times. The original
// tuple is the sandbox's view: for a DNATed flow its destination is the
// one the sandbox dialled, not the relay's. A flow dropped or rejected by
// the firewall is never confirmed, so it has no destroy event: only flows
// that were let out end here.
//
// A closed TCP connection stays in conntrack for TIME_WAIT (2 minutes), so
// update events are read too: a sandbox TCP flow entering TIME_WAIT or
// CLOSE is reported then, its counters read with a Get, and its destroy
// event is skipped (endedFlowOf, publish).
//
// One goroutine decodes the events (ti-mo/conntrack) into a small channel,
// another keeps those whose original source is a sandbox's guest address
// and puts them in a bounded queue (ctQueueLen) without waiting: a storm
// of ended flows drops entries (counted, FlowEndsDropped) rather than
// holding up the socket, whose own overflow is ignored (NoENOBUFS: the
// kernel drops silently rather than killing the reader). A third publishes
// to the activity feed.

// ctQueueLen bounds the ended flows waiting to be published.
const ctQueueLen = 4096

// ctReadBuffer is the netlink socket's receive buffer.
const ctReadBuffer = 4 << 20

// ctSysctls are turned on at start: byte/packet counters and start/stop
// times on new conntrack entries.
var ctSysctls = []string{
	"/proc/sys/net/netfilter/nf_conntrack_acct",
	"/proc/sys/net/netfilter/nf_conntrack_timestamp",
}

// flowEnds is the conntrack reader's state.
type flowEnds struct {
	subnet netip.Prefix
	lis    ctListener           // the listener (relisten replaces it)
	events chan conntrack.Event // every listener's events
	get    *conntrack.Conn      // Get of an early-reported flow
	// listen opens a listener sending to events (listenFlows; tests
	// replace it).
	listen func(events chan conntrack.Event) (ctConn, chan error, error)
	log    *slog.Logger
	// done is closed by close; stopped by the reader (read) when it has
	// returned, its listeners closed.
	done, stopped chan struct{}
	dropped       atomic.Uint64
}

// ctConn is a conntrack listener (*conntrack.Conn). Like ti-mo/conntrack's,
// its Close waits for its worker, which may be blocked handing over an
// event or an error: someone must read both channels meanwhile.
type ctConn interface{ Close() error }

// ctListener holds the reader's current listener. The reader replaces it
// when its worker stops (relisten) and close closes it, and the two can
// meet (a worker fails while the daemon shuts down): both go through mu,
// each listener is taken out by exactly one of them and closed by it, and
// once closed no new listener is installed (relisten closes the one it
// opened itself), so none is left open.
type ctListener struct {
	mu     sync.Mutex
	conn   ctConn // nil while relisten replaces it, and once closed
	closed bool
}

// take removes the current listener (relisten closes it).
func (l *ctListener) take() ctConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.conn
	l.conn = nil
	return c
}

// put installs c; false once closed (the caller closes c).
func (l *ctListener) put(c ctConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.conn = c
	return true
}

// close marks the listener closed and returns the one to close (nil: none
// installed).
func (l *ctListener) close() ctConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	c := l.conn
	l.conn = nil
	return c
}

// startFlowEnds listens for ended flows when the audit observer takes them
// (audit.EndObserver). Failing only disables "egress.end".
func (m *Manager) startFlowEnds() {
	obs, ok := m.cfg.AuditObserver.(audit.EndObserver)
	if !ok || m.cfg.AuditGroup == 0 {
		return
	}
	for _, p := range ctSysctls {
		if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
			m.log.Warn("egress.end: cannot turn on conntrack accounting", "sysctl", p, "err", err)
		}
	}
	fe := newFlowEnds(m.cfg.Subnet, listenConn, m.log)
	c, errs, err := fe.listen(fe.events)
	if err != nil {
		m.log.Warn("egress.end disabled: conntrack events", "err", err)
		return
	}
	get, err := conntrack.Dial(nil)
	if err != nil {
		_ = c.Close()
		m.log.Warn("egress.end disabled: conntrack", "err", err)
		return
	}
	fe.get = get
	fe.lis.put(c)
	m.ends = fe
	q := make(chan endedFlow, ctQueueLen)
	go fe.read(errs, m.endedFlowOf, q)
	go fe.publish(q, obs)
}

func newFlowEnds(subnet netip.Prefix, listen func(chan conntrack.Event) (ctConn, chan error, error), log *slog.Logger) *flowEnds {
	return &flowEnds{subnet: subnet, events: make(chan conntrack.Event, 256), listen: listen, log: log,
		done: make(chan struct{}), stopped: make(chan struct{})}
}

// read keeps the events keep maps to an ended flow, queueing them on q
// without waiting, until close; errs is the current listener's.
func (fe *flowEnds) read(errs chan error, keep func(conntrack.Event) (endedFlow, bool), q chan<- endedFlow) {
	defer close(fe.stopped)
	for {
		select {
		case <-fe.done:
			return
		case err := <-errs:
			// ti-mo/conntrack's one worker has stopped (a receive or
			// decode error): listen again rather than lose egress.end
			// for the rest of the daemon's life.
			fe.log.Error("egress.end: conntrack reader stopped; listening again", "err", err)
			errs = fe.relisten()
		case ev := <-fe.events:
			e, ok := keep(ev)
			if !ok {
				continue
			}
			select {
			case q <- e:
			default:
				fe.dropped.Add(1)
			}
		}
	}
}

// listenConn is listenFlows as a ctConn.
func listenConn(events chan conntrack.Event) (ctConn, chan error, error) {
	c, errs, err := listenFlows(events)
	if err != nil {
		return nil, nil, err
	}
	return c, errs, nil
}

// listenFlows opens a conntrack listener for update and destroy events.
func listenFlows(events chan conntrack.Event) (*conntrack.Conn, chan error, error) {
	c, err := conntrack.Dial(nil)
	if err != nil {
		return nil, nil, err
	}
	_ = c.SetOption(netlink.NoENOBUFS, true)
	_ = c.SetReadBuffer(ctReadBuffer)
	errs, err := c.Listen(events, 1, []netfilter.NetlinkGroup{netfilter.GroupCTUpdate, netfilter.GroupCTDestroy})
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return c, errs, nil
}

// relisten replaces a listener whose worker stopped, trying once a second
// until it works or the reader is closed; it returns the new listener's
// error channel (nil, which blocks, once closed). A listener it opens
// after close is closed here (ctListener): none outlives the reader.
func (fe *flowEnds) relisten() chan error {
	if old := fe.lis.take(); old != nil {
		closeDraining(old, fe.events, nil)
	}
	for {
		c, errs, err := fe.listen(fe.events)
		if err == nil {
			if !fe.lis.put(c) { // closed meanwhile
				closeDraining(c, fe.events, errs)
				return nil
			}
			return errs
		}
		fe.log.Warn("egress.end: listening again failed", "err", err)
		select {
		case <-fe.done:
			return nil
		case <-time.After(time.Second):
		}
	}
}

// closeDraining closes c, reading its events and errors until its worker
// has returned (Close waits for it).
func closeDraining(c ctConn, events <-chan conntrack.Event, errs <-chan error) {
	closed := make(chan struct{})
	go func() {
		_ = c.Close()
		close(closed)
	}()
	for {
		select {
		case <-closed:
			return
		case <-events:
		case <-errs:
		}
	}
}

// endedFlow is an ended flow of sandbox id waiting to be published; early:
// a TCP flow that reached TIME_WAIT or CLOSE, whose counters are still to
// be read.
type endedFlow struct {
	id    string
	slot  int
	flow  *conntrack.Flow
	early bool
}

// endedFlowOf keeps the destroy events of sandbox flows, and the update
// events of sandbox TCP flows entering TIME_WAIT or CLOSE: conntrack keeps
// a closed connection for nf_conntrack_tcp_timeout_time_wait (2 minutes),
// so its destroy event would come that late; it is reported when it
// closes, and its destroy event is then skipped.
func (m *Manager) endedFlowOf(ev conntrack.Event) (endedFlow, bool) {
	if ev.Flow == nil {
		return endedFlow{}, false
	}
	early := false
	switch ev.Type {
	case conntrack.EventDestroy:
	case conntrack.EventUpdate:
		tcp := ev.Flow.ProtoInfo.TCP
		if tcp == nil || (tcp.State != tcpTimeWait && tcp.State != tcpClose) {
			return endedFlow{}, false
		}
		early = true
	default:
		return endedFlow{}, false
	}
	slot, _, ok := flowEndOf(m.cfg.Subnet, ev.Flow)
	if !ok {
		return endedFlow{}, false
	}
	id := m.sandboxOfIface(HostIfName(m.cfg.NamePrefix, slot))
	if id == "" {
		return endedFlow{}, false
	}
	return endedFlow{id: id, slot: slot, flow: ev.Flow, early: early}, true
}

// TCP conntrack states (enum tcp_conntrack).
const (
	tcpTimeWait = 7
	tcpClose    = 8
)

// reportedMax bounds the ids of flows reported early (their destroy event
// still to come); beyond it the oldest half is forgotten, and such a
// flow's destroy is reported a second time.
const reportedMax = 1 << 14

// publish hands the queued flows to obs; it alone owns reported.
func (fe *flowEnds) publish(q <-chan endedFlow, obs audit.EndObserver) {
	reported := map[uint32]uint64{} // flow id → sequence number
	var seq uint64
	for {
		var e endedFlow
		select {
		case <-fe.done:
			return
		case e = <-q:
		}
		f := e.flow
		if e.early {
			if _, ok := reported[f.ID]; ok {
				continue
			}
			got, err := fe.get.Get(*f)
			if err != nil {
				continue // gone already: its destroy event reports it
			}
			f = &got
			seq++
			reported[f.ID] = seq
			if len(reported) > reportedMax {
				for k, v := range reported {
					if v < seq-reportedMax/2 {
						delete(reported, k)
					}
				}
			}
		} else if _, ok := reported[f.ID]; ok {
			delete(reported, f.ID)
			continue
		}
		_, end, ok := flowEndOf(fe.subnet, f)
		if !ok {
			continue
		}
		if e.early {
			end.Time = time.Now()
			if !f.Timestamp.Start.IsZero() {
				end.Duration = end.Time.Sub(f.Timestamp.Start)
			}
		}
		obs.EgressEnd(e.id, end)
	}
}

// FlowEndsDropped is how many ended flows were not published because the
// queue was full.
func (m *Manager) FlowEndsDropped() uint64 {
	if m.ends == nil {
		return 0
	}
	return m.ends.dropped.Load()
}

// closeFlowEnds stops the reader (Close).
func (m *Manager) closeFlowEnds() {
	if m.ends == nil {
		return
	}
	m.ends.close()
	_ = m.ends.get.Close()
}

// close stops the reader and returns once it has, every listener closed.
func (fe *flowEnds) close() {
	// The listener first: its worker may be sending an event or an error,
	// which the reader, still running, takes (Close waits for the worker).
	// An error there makes the reader relisten: it finds the listener
	// closed, and closes the one it opened itself.
	if c := fe.lis.close(); c != nil {
		if err := c.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
			fe.log.Debug("closing the conntrack reader", "err", err)
		}
	}
	close(fe.done)
	<-fe.stopped
}

// flowEndOf maps an ended conntrack flow to the slot of the sandbox that
// opened it, when its original source is a guest address of subnet (the
// second address of a slot's /30) and its destination lies outside: not
// the daemon's own traffic to a sandbox (from a host-side address), not
// sandbox DNS redirected to the filter (reported as egress.dns), not the
// microVM volume server.
func flowEndOf(subnet netip.Prefix, f *conntrack.Flow) (int, audit.FlowEnd, bool) {
	src := f.TupleOrig.IP.SourceAddress.Unmap()
	dst := f.TupleOrig.IP.DestinationAddress.Unmap()
	if !src.Is4() || !subnet.Contains(src) || subnet.Contains(dst) || dst == VolumeServerAddr {
		return 0, audit.FlowEnd{}, false
	}
	a, base := src.As4(), subnet.Masked().Addr().As4()
	off := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) -
		(uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3]))
	if off%4 != 2 {
		return 0, audit.FlowEnd{}, false
	}
	slot := int(off / 4)
	proto := f.TupleOrig.Proto.Protocol
	port := f.TupleOrig.Proto.DestinationPort
	reply := f.TupleReply.IP.SourceAddress.Unmap()
	if port == 53 && subnet.Contains(reply) {
		return 0, audit.FlowEnd{}, false // redirected to the DNS filter
	}
	e := audit.FlowEnd{Time: f.Timestamp.Stop, Protocol: protoName(proto), Dst: dst,
		BytesOut: f.CountersOrig.Bytes, BytesIn: f.CountersReply.Bytes,
		PacketsOut: f.CountersOrig.Packets, PacketsIn: f.CountersReply.Packets}
	if proto == unix.IPPROTO_TCP || proto == unix.IPPROTO_UDP {
		e.Port = port
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if !f.Timestamp.Start.IsZero() && !f.Timestamp.Stop.IsZero() && f.Timestamp.Stop.After(f.Timestamp.Start) {
		e.Duration = f.Timestamp.Stop.Sub(f.Timestamp.Start)
	}
	return slot, e, true
}

func protoName(p uint8) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_ICMP:
		return "icmp"
	}
	return strconv.Itoa(int(p))
}
