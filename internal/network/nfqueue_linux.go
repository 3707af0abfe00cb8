//go:build linux

package network

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// A minimal nfnetlink_queue client (the approval hold, approval_linux.go).
// The module proxy serves no maintained Go NFQUEUE library here
// (github.com/florianl/go-nfqueue answers 403), so this speaks the protocol
// on github.com/mdlayher/netlink: bind a queue, copy 128 bytes of each
// packet (IPv4 and TCP headers), read packets, send verdicts. The queue is
// bound without NFQA_CFG_F_FAIL_OPEN and the rule has no bypass flag: with no
// reader, queued packets are dropped (fail closed).

// nfnetlink_queue constants (linux/netfilter/nfnetlink_queue.h).
const (
	nfnlSubsysQueue = 3

	nfqnlMsgPacket  = 0
	nfqnlMsgVerdict = 1
	nfqnlMsgConfig  = 2

	nfqaPacketHdr    = 1
	nfqaVerdictHdr   = 2
	nfqaIfindexIndev = 5
	nfqaPayload      = 10

	nfqaCfgCmd         = 1
	nfqaCfgParams      = 2
	nfqaCfgQueueMaxlen = 3

	nfqnlCfgCmdBind = 1
	nfqnlCopyPacket = 2

	nfDrop   = 0
	nfAccept = 1
	nfRepeat = 4

	nfqCopyRange = 128
	nfqMaxLen    = 4096
)

// queuedPacket is one packet the kernel holds for a verdict.
type queuedPacket struct {
	ID      uint32
	InIndex uint32
	Proto   uint8
	Src     netip.Addr
	Dst     netip.Addr
	DPort   uint16
	SYN     bool
}

// nfQueue is one bound queue.
type nfQueue struct {
	num  uint16
	conn *netlink.Conn
	// sendMu serialises verdicts (netlink.Conn allows Send next to a
	// blocked Receive).
	sendMu sync.Mutex
	closed atomic.Bool
}

func nfgen(family uint8, resID uint16) []byte {
	b := []byte{family, unix.NFNETLINK_V0, 0, 0}
	binary.BigEndian.PutUint16(b[2:], resID)
	return b
}

// openNFQueue binds queue num (EBUSY-like errors if another process holds it).
func openNFQueue(num uint16) (*nfQueue, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("opening nfnetlink: %w", err)
	}
	_ = c.SetOption(netlink.NoENOBUFS, true)
	_ = c.SetReadBuffer(1 << 20)
	q := &nfQueue{num: num, conn: c}
	cmd := []byte{nfqnlCfgCmdBind, 0, 0, 0} // command, pad, pf (be16, unused by BIND)
	params := make([]byte, 5)
	binary.BigEndian.PutUint32(params, nfqCopyRange)
	params[4] = nfqnlCopyPacket
	maxlen := binary.BigEndian.AppendUint32(nil, nfqMaxLen)
	if err := q.config(cmd); err != nil {
		c.Close()
		return nil, fmt.Errorf("binding NFQUEUE %d (is another daemon using it? see --approval-queue): %w", num, err)
	}
	if err := q.configAttrs([]netlink.Attribute{{Type: nfqaCfgParams, Data: params}, {Type: nfqaCfgQueueMaxlen, Data: maxlen}}); err != nil {
		c.Close()
		return nil, fmt.Errorf("configuring NFQUEUE %d: %w", num, err)
	}
	return q, nil
}

func (q *nfQueue) config(cmd []byte) error {
	return q.configAttrs([]netlink.Attribute{{Type: nfqaCfgCmd, Data: cmd}})
}

func (q *nfQueue) configAttrs(attrs []netlink.Attribute) error {
	ab, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return err
	}
	_, err = q.conn.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(nfnlSubsysQueue<<8 | nfqnlMsgConfig), Flags: netlink.Request | netlink.Acknowledge},
		Data:   append(nfgen(unix.AF_UNSPEC, q.num), ab...),
	})
	return err
}

// Close releases the socket, which unbinds the queue (the kernel drops the
// instances a released netlink socket owned): packets queued later are
// dropped. No UNBIND message: Execute would wait for the blocked Receive.
func (q *nfQueue) Close() error {
	q.closed.Store(true)
	return q.conn.Close()
}

// receive returns the next batch of queued packets.
func (q *nfQueue) receive() ([]queuedPacket, error) {
	msgs, err := q.conn.Receive()
	if err != nil {
		return nil, err
	}
	var out []queuedPacket
	for _, m := range msgs {
		if m.Header.Type != netlink.HeaderType(nfnlSubsysQueue<<8|nfqnlMsgPacket) || len(m.Data) < 4 {
			continue
		}
		p, ok := parseQueued(m.Data[4:])
		if ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// parseQueued reads a packet message's attributes (after nfgenmsg).
func parseQueued(b []byte) (queuedPacket, bool) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return queuedPacket{}, false
	}
	var p queuedPacket
	var haveID bool
	var payload []byte
	for ad.Next() {
		switch ad.Type() {
		case nfqaPacketHdr:
			if d := ad.Bytes(); len(d) >= 4 {
				p.ID, haveID = binary.BigEndian.Uint32(d), true
			}
		case nfqaIfindexIndev:
			if d := ad.Bytes(); len(d) >= 4 {
				p.InIndex = binary.BigEndian.Uint32(d)
			}
		case nfqaPayload:
			payload = ad.Bytes()
		}
	}
	if ad.Err() != nil || !haveID {
		return queuedPacket{}, false
	}
	parseIPv4(&p, payload)
	return p, true
}

// parseIPv4 fills the addresses, protocol and TCP port of an IPv4 packet;
// anything else leaves them zero.
func parseIPv4(p *queuedPacket, b []byte) {
	if len(b) < 20 || b[0]>>4 != 4 {
		return
	}
	ihl := int(b[0]&0x0f) * 4
	p.Proto = b[9]
	p.Src = netip.AddrFrom4([4]byte(b[12:16]))
	p.Dst = netip.AddrFrom4([4]byte(b[16:20]))
	if (p.Proto == unix.IPPROTO_TCP || p.Proto == unix.IPPROTO_UDP) && len(b) >= ihl+4 {
		p.DPort = binary.BigEndian.Uint16(b[ihl+2:])
	}
	if p.Proto == unix.IPPROTO_TCP && len(b) >= ihl+14 {
		p.SYN = b[ihl+13]&0x02 != 0
	}
}

// verdict gives packet id its verdict (nfAccept, nfDrop, nfRepeat).
func (q *nfQueue) verdict(id uint32, v uint32) error {
	hdr := make([]byte, 8)
	binary.BigEndian.PutUint32(hdr, v)
	binary.BigEndian.PutUint32(hdr[4:], id)
	ab, err := netlink.MarshalAttributes([]netlink.Attribute{{Type: nfqaVerdictHdr, Data: hdr}})
	if err != nil {
		return err
	}
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	_, err = q.conn.Send(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(nfnlSubsysQueue<<8 | nfqnlMsgVerdict), Flags: netlink.Request},
		Data:   append(nfgen(unix.AF_UNSPEC, q.num), ab...),
	})
	if err != nil {
		return fmt.Errorf("NFQUEUE %d verdict for packet %d: %w", q.num, id, err)
	}
	return nil
}
