//go:build linux

// Package nflog reads packets that nftables `log group N` rules hand to
// nfnetlink_log (NFLOG), on github.com/mdlayher/netlink. Only what the
// egress audit needs: the rule's prefix, the input interface and the first
// bytes of the packet.
package nflog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nfnetlink_log constants (linux/netfilter/nfnetlink_log.h).
const (
	subsysULOG   = 4 // NFNL_SUBSYS_ULOG
	msgPacket    = 0 // NFULNL_MSG_PACKET
	msgConfig    = 1 // NFULNL_MSG_CONFIG
	cfgCmd       = 1 // NFULA_CFG_CMD
	cfgMode      = 2 // NFULA_CFG_MODE
	cfgQThresh   = 5 // NFULA_CFG_QTHRESH
	cmdBind      = 1 // NFULNL_CFG_CMD_BIND
	copyPacket   = 2 // NFULNL_COPY_PACKET
	attrInDev    = 4 // NFULA_IFINDEX_INDEV
	attrPayload  = 9 // NFULA_PAYLOAD
	attrPrefix   = 10
	nfnetlinkV0  = 0
	headerLength = 4 // struct nfgenmsg
)

// Packet is one logged packet.
type Packet struct {
	Time    time.Time
	Prefix  string // the log rule's prefix
	InDev   uint32 // input interface index (0 if none)
	Payload []byte // network header onwards, at most the copy range
}

// Conn is a bound NFLOG group.
type Conn struct {
	nl    *netlink.Conn
	group uint16
}

// Open binds group (which must not be bound by another socket: the kernel
// allows one listener per group and network namespace) and asks for the
// first copyRange bytes of every packet, delivered one by one.
func Open(group uint16, copyRange uint32) (*Conn, error) {
	nl, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("nflog: opening netlink: %w", err)
	}
	// Bursts of new flows must not overflow the socket (ENOBUFS loses them).
	_ = nl.SetReadBuffer(1 << 20)
	c := &Conn{nl: nl, group: group}
	mode := make([]byte, 6)
	binary.BigEndian.PutUint32(mode, copyRange)
	mode[4] = copyPacket
	err = c.config([]netlink.Attribute{
		{Type: cfgCmd, Data: []byte{cmdBind}},
		{Type: cfgMode, Data: mode},
		{Type: cfgQThresh, Data: binary.BigEndian.AppendUint32(nil, 1)},
	})
	if err != nil {
		nl.Close()
		return nil, fmt.Errorf("nflog: binding group %d: %w", group, err)
	}
	return c, nil
}

func (c *Conn) config(attrs []netlink.Attribute) error {
	b, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return err
	}
	data := append([]byte{unix.AF_UNSPEC, nfnetlinkV0, byte(c.group >> 8), byte(c.group)}, b...)
	_, err = c.nl.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(subsysULOG<<8 | msgConfig), Flags: netlink.Request | netlink.Acknowledge},
		Data:   data,
	})
	return err
}

// Read calls fn for every logged packet until Close; it returns nil then.
// A lost burst (ENOBUFS) is reported to lost and reading goes on.
func (c *Conn) Read(fn func(Packet), lost func(error)) error {
	for {
		msgs, err := c.nl.Receive()
		if err != nil {
			if errors.Is(err, unix.ENOBUFS) {
				if lost != nil {
					lost(err)
				}
				continue
			}
			if errors.Is(err, unix.EBADF) || isClosed(err) {
				return nil
			}
			return fmt.Errorf("nflog: reading group %d: %w", c.group, err)
		}
		now := time.Now().UTC()
		for _, m := range msgs {
			if m.Header.Type != netlink.HeaderType(subsysULOG<<8|msgPacket) || len(m.Data) < headerLength {
				continue
			}
			if p, ok := parsePacket(m.Data[headerLength:]); ok {
				p.Time = now
				fn(p)
			}
		}
	}
}

func isClosed(err error) bool {
	var oe *netlink.OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	return err != nil && (errors.Is(err, unix.EBADF) || err.Error() == "use of closed file")
}

func parsePacket(b []byte) (Packet, bool) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return Packet{}, false
	}
	ad.ByteOrder = binary.BigEndian
	var p Packet
	for ad.Next() {
		switch ad.Type() {
		case attrInDev:
			p.InDev = ad.Uint32()
		case attrPayload:
			p.Payload = append([]byte(nil), ad.Bytes()...)
		case attrPrefix:
			p.Prefix = ad.String()
		}
	}
	return p, ad.Err() == nil
}

// Close ends Read. Closing the socket unbinds the group: the kernel drops
// the instances of a netlink port that goes away. (An explicit UNBIND would
// wait for the lock Read's Receive holds.)
func (c *Conn) Close() error {
	return c.nl.Close()
}
