package socksrelay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"
)

// A small SOCKS5 client (RFC 1928 CONNECT, RFC 1929 username/password): it
// returns the server's own *net.TCPConn, so the relay's copies keep the
// kernel's splice and can half-close, which a wrapped connection loses.

// Error is a SOCKS server's refusal: of the auth method, the credentials
// or the CONNECT (Reply is RFC 1928's REP, 0 for the auth steps).
type Error struct {
	Step  string
	Reply byte
}

func (e *Error) Error() string {
	if e.Reply != 0 {
		return fmt.Sprintf("socks5 %s refused: %s", e.Step, replyText(e.Reply))
	}
	return "socks5 " + e.Step + " refused"
}

func replyText(rep byte) string {
	switch rep {
	case 1:
		return "general failure"
	case 2:
		return "connection not allowed by ruleset"
	case 3:
		return "network unreachable"
	case 4:
		return "host unreachable"
	case 5:
		return "connection refused"
	case 6:
		return "TTL expired"
	case 7:
		return "command not supported"
	case 8:
		return "address type not supported"
	}
	return "reply " + strconv.Itoa(int(rep))
}

// socksConnect opens target (host:port; host a name or an IP) through the
// SOCKS5 server at server.
func socksConnect(ctx context.Context, server, user, pass, target string, refuse func(netip.Addr) bool) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(target)
	if err != nil {
		return nil, fmt.Errorf("target %q: %w", target, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("target %q: bad port", target)
	}
	if len(user) > 255 || len(pass) > 255 || len(host) > 255 {
		return nil, errors.New("socks5: username, password and host name are at most 255 bytes")
	}
	var d net.Dialer
	if refuse != nil {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			if ap, err := netip.ParseAddrPort(address); err != nil || refuse(ap.Addr()) {
				return fmt.Errorf("socks5 server %s at %s: a private or internal address", server, address)
			}
			return nil
		}
	}
	c, err := d.DialContext(ctx, "tcp", server)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if err := handshake(c, user, pass, host, uint16(port)); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

func handshake(c net.Conn, user, pass, host string, port uint16) error {
	auth := user != "" || pass != ""
	method := byte(0x00)
	if auth {
		method = 0x02
	}
	if _, err := c.Write([]byte{5, 1, method}); err != nil {
		return err
	}
	var b [4]byte
	if _, err := io.ReadFull(c, b[:2]); err != nil {
		return fmt.Errorf("socks5 greeting: %w", err)
	}
	if b[0] != 5 || b[1] != method {
		return &Error{Step: "auth method"}
	}
	if auth {
		msg := append([]byte{1, byte(len(user))}, user...)
		msg = append(append(msg, byte(len(pass))), pass...)
		if _, err := c.Write(msg); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, b[:2]); err != nil {
			return fmt.Errorf("socks5 auth: %w", err)
		}
		if b[1] != 0 {
			return &Error{Step: "username/password auth"}
		}
	}
	req := []byte{5, 1, 0}
	if a, err := netip.ParseAddr(host); err == nil && a.Unmap().Is4() {
		a4 := a.Unmap().As4()
		req = append(append(req, 1), a4[:]...)
	} else if err == nil {
		a16 := a.As16()
		req = append(append(req, 4), a16[:]...)
	} else {
		req = append(append(req, 3, byte(len(host))), host...)
	}
	req = append(req, byte(port>>8), byte(port))
	if _, err := c.Write(req); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, b[:4]); err != nil {
		return fmt.Errorf("socks5 connect: %w", err)
	}
	if b[0] != 5 {
		return fmt.Errorf("socks5 connect: version %d in the reply", b[0])
	}
	if b[1] != 0 {
		return &Error{Step: "CONNECT", Reply: b[1]}
	}
	// The bound address, which the relay does not need.
	var skip int
	switch b[3] {
	case 1:
		skip = 4
	case 4:
		skip = 16
	case 3:
		if _, err := io.ReadFull(c, b[:1]); err != nil {
			return fmt.Errorf("socks5 connect: %w", err)
		}
		skip = int(b[0])
	default:
		return fmt.Errorf("socks5 connect: address type %d in the reply", b[3])
	}
	if _, err := io.ReadFull(c, make([]byte, skip+2)); err != nil {
		return fmt.Errorf("socks5 connect: %w", err)
	}
	return nil
}
