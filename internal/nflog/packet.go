package nflog

import (
	"encoding/binary"
	"net/netip"
)

// Flow is what a logged IPv4 packet says about its connection.
type Flow struct {
	Protocol string // tcp, udp, icmp or the protocol number
	Src, Dst netip.Addr
	Port     uint16 // destination port (tcp, udp, sctp), else 0
}

// ParseIPv4 reads the IPv4 (and TCP/UDP port) header fields of b.
func ParseIPv4(b []byte) (Flow, bool) {
	if len(b) < 20 || b[0]>>4 != 4 {
		return Flow{}, false
	}
	ihl := int(b[0]&0x0f) * 4
	if ihl < 20 || len(b) < ihl {
		return Flow{}, false
	}
	f := Flow{
		Src: netip.AddrFrom4([4]byte(b[12:16])),
		Dst: netip.AddrFrom4([4]byte(b[16:20])),
	}
	proto := b[9]
	switch proto {
	case 6:
		f.Protocol = "tcp"
	case 17:
		f.Protocol = "udp"
	case 1:
		f.Protocol = "icmp"
	case 132:
		f.Protocol = "sctp"
	default:
		f.Protocol = itoa(proto)
	}
	fragOff := binary.BigEndian.Uint16(b[6:8]) & 0x1fff
	if (proto == 6 || proto == 17 || proto == 132) && fragOff == 0 && len(b) >= ihl+4 {
		f.Port = binary.BigEndian.Uint16(b[ihl+2 : ihl+4])
	}
	return f, true
}

func itoa(v byte) string {
	if v == 0 {
		return "0"
	}
	var buf [3]byte
	i := len(buf)
	for v > 0 {
		i--
		buf[i] = '0' + v%10
		v /= 10
	}
	return string(buf[i:])
}
