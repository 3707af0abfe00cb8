// Package sockstest is a SOCKS5 server for tests (RFC 1928 CONNECT with
// RFC 1929 username/password auth) that records every CONNECT target.
package sockstest

import (
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
)

// Server is a SOCKS5 server requiring User/Password (both empty: no auth).
type Server struct {
	User, Password string
	// Dial opens the targets (nil: a plain net.Dialer's); a test dials
	// from its server's namespace and address with it.
	Dial func(network, addr string) (net.Conn, error)
	// Hosts resolves CONNECT names the server's own resolver does not
	// know (name → IP); others go to the resolver.
	Hosts map[string]string

	mu      sync.Mutex
	targets []string // CONNECT targets, host:port as asked
	authBad int
}

// Targets returns the CONNECT targets asked so far (after a successful
// auth), in order.
func (s *Server) Targets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.targets...)
}

// AuthFailures counts refused credentials.
func (s *Server) AuthFailures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.authBad
}

// Serve accepts on l until it is closed.
func (s *Server) Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go s.handle(c)
	}
}

func (s *Server) handle(c net.Conn) {
	defer c.Close()
	b := make([]byte, 262)
	if _, err := io.ReadFull(c, b[:2]); err != nil || b[0] != 5 {
		return
	}
	methods := make([]byte, b[1])
	if _, err := io.ReadFull(c, methods); err != nil {
		return
	}
	want := byte(0)
	if s.User != "" || s.Password != "" {
		want = 2
	}
	ok := false
	for _, m := range methods {
		ok = ok || m == want
	}
	if !ok {
		_, _ = c.Write([]byte{5, 0xff})
		return
	}
	_, _ = c.Write([]byte{5, want})
	if want == 2 {
		if _, err := io.ReadFull(c, b[:2]); err != nil {
			return
		}
		user := make([]byte, b[1])
		if _, err := io.ReadFull(c, user); err != nil {
			return
		}
		if _, err := io.ReadFull(c, b[:1]); err != nil {
			return
		}
		pass := make([]byte, b[0])
		if _, err := io.ReadFull(c, pass); err != nil {
			return
		}
		if string(user) != s.User || string(pass) != s.Password {
			s.mu.Lock()
			s.authBad++
			s.mu.Unlock()
			_, _ = c.Write([]byte{1, 1})
			return
		}
		_, _ = c.Write([]byte{1, 0})
	}
	if _, err := io.ReadFull(c, b[:4]); err != nil || b[0] != 5 {
		return
	}
	if b[1] != 1 { // CONNECT only
		_, _ = c.Write([]byte{5, 7, 0, 1, 0, 0, 0, 0, 0, 0})
		return
	}
	var host string
	switch b[3] {
	case 1:
		if _, err := io.ReadFull(c, b[:4]); err != nil {
			return
		}
		host = net.IP(b[:4]).String()
	case 4:
		if _, err := io.ReadFull(c, b[:16]); err != nil {
			return
		}
		host = net.IP(b[:16]).String()
	case 3:
		if _, err := io.ReadFull(c, b[:1]); err != nil {
			return
		}
		n := int(b[0])
		if _, err := io.ReadFull(c, b[:n]); err != nil {
			return
		}
		host = string(b[:n])
	default:
		_, _ = c.Write([]byte{5, 8, 0, 1, 0, 0, 0, 0, 0, 0})
		return
	}
	if _, err := io.ReadFull(c, b[:2]); err != nil {
		return
	}
	target := net.JoinHostPort(host, strconv.Itoa(int(b[0])<<8|int(b[1])))
	s.mu.Lock()
	s.targets = append(s.targets, target)
	s.mu.Unlock()
	dialFn := s.Dial
	if dialFn == nil {
		dialFn = (&net.Dialer{}).Dial
	}
	dial := target
	if ip, ok := s.Hosts[host]; ok {
		dial = net.JoinHostPort(ip, strconv.Itoa(int(b[0])<<8|int(b[1])))
	}
	up, err := dialFn("tcp", dial)
	if err != nil {
		_, _ = c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
		return
	}
	defer up.Close()
	_, _ = c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if x, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = x.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(up, c)
	go cp(c, up)
	<-done
	<-done
}
