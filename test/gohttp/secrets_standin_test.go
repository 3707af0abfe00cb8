//go:build e2e

package gohttp

// The stand-in internet of issue 29's egress-secret proofs
// (secrets_proxy_test.go, secrets_attacks_test.go): a network namespace on
// egress.test.mjs's /29 (<ext>.8-.15; the test daemon resolves through
// <ext>.12 and opens <ext>.0/27), HTTPS servers A and B with a leaf of the
// upstream CA the node trusts (AIRLOCK_E2E_UPSTREAM_CA_DIR), C with one it
// does not, and a DNS server. Every server records what it parsed (seenLog)
// and A also every byte it read after TLS (raw), so a check can read the
// servers' own records.

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netns"

	"github.com/airlock-sandbox/airlock/internal/egressproxy"
)

// The stand-in's names: A and B have certificates the node trusts, C one it
// does not; D is a CNAME to A and E an A record of A's address.
const (
	nameA = "secrets-a.test"
	nameB = "secrets-b.test"
	nameC = "secrets-c.test"
	nameD = "secrets-d.test"
	nameE = "secrets-e.test"
)

// seen is what one stand-in server received.
type seen struct {
	server string
	host   string
	path   string
	proto  string
	header http.Header
	// bodyLen is how many body bytes it read.
	bodyLen int64
	// wsFrames are the WebSocket frames a /ws request received.
	wsFrames []string
}

type seenLog struct {
	mu   sync.Mutex
	reqs []seen
}

func (l *seenLog) add(s seen) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs = append(l.reqs, s)
	return len(l.reqs) - 1
}

func (l *seenLog) addFrame(i int, f string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs[i].wsFrames = append(l.reqs[i].wsFrames, f)
}

func (l *seenLog) all() []seen {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]seen, len(l.reqs))
	for i, r := range l.reqs {
		out[i] = r
		out[i].wsFrames = append([]string(nil), r.wsFrames...)
	}
	return out
}

// rawLog holds every byte a server read after TLS.
type rawLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *rawLog) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

type rawListener struct {
	net.Listener
	log *rawLog
}

func (l rawListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &rawConn{Conn: c, log: l.log}, nil
}

type rawConn struct {
	net.Conn
	log *rawLog
}

func (c *rawConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.log.mu.Lock()
	c.log.buf.Write(b[:n])
	c.log.mu.Unlock()
	return n, err
}

// inNetNS runs fn on a thread in the named network namespace (sockets made
// there stay in it).
func inNetNS(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return // the thread stays locked and is discarded
		}
		target, err := netns.GetFromName(ns)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			errc <- err
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- err
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// standIn is the running stand-in internet.
type standIn struct {
	log                  seenLog
	rawA                 rawLog
	ipA, ipB, ipC, ipDNS string
}

// since returns what the servers recorded after the first n requests.
func (s *standIn) since(n int) []seen { return s.log.all()[n:] }

func newStandIn(t *testing.T) *standIn {
	t.Helper()
	caDir := os.Getenv("AIRLOCK_E2E_UPSTREAM_CA_DIR")
	if caDir == "" {
		t.Fatal("AIRLOCK_E2E_UPSTREAM_CA_DIR must be set (scripts/test.sh makes the upstream CA)")
	}
	leaf, err := tls.LoadX509KeyPair(filepath.Join(caDir, "leaf.pem"), filepath.Join(caDir, "leaf.key"))
	if err != nil {
		t.Fatal(err)
	}
	// Another CA, which the node does not trust, for the bad upstream.
	otherCA, err := egressproxy.NewCA("airlock-e2e-untrusted")
	if err != nil {
		t.Fatal(err)
	}
	ext := os.Getenv("AIRLOCK_E2E_EXT_NET")
	if ext == "" {
		ext = "10.78.255"
	}
	// egress.test.mjs's /29 (<ext>.8-.15, resolver on .12, which the test
	// daemon forwards to); the Go e2e stage runs before the node one.
	s := &standIn{ipA: ext + ".10", ipB: ext + ".11", ipDNS: ext + ".12", ipC: ext + ".13"}
	hostIP := ext + ".9"
	tag := uniqueTag(t)
	ns := "e2e-secrets-" + tag
	hostIf, nsIf := "e2sx"+tag[:6], "e2sy"+tag[:6]
	ip := extNS(t, ns, hostIf, nsIf, hostIP+"/29")
	for _, a := range []string{s.ipA, s.ipB, s.ipDNS, s.ipC} {
		ip("-n", ns, "addr", "add", a+"/29", "dev", nsIf)
	}
	ip("-n", ns, "route", "add", "default", "via", hostIP)

	listen := func(network, addr string) net.Listener {
		t.Helper()
		var l net.Listener
		if err := inNetNS(ns, func() (err error) { l, err = net.Listen(network, addr); return err }); err != nil {
			t.Fatal(err)
		}
		return l
	}
	serve := func(server, addr string, cert *tls.Certificate, raw *rawLog) {
		t.Helper()
		l := listen("tcp4", addr)
		if cert != nil {
			// HTTP/1.1 only, as the proxy speaks upstream; the raw log sits
			// after TLS.
			l = tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{*cert}, NextProtos: []string{"http/1.1"}})
		}
		if raw != nil {
			l = rawListener{Listener: l, log: raw}
		}
		srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: s.handler(server)}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
	}
	serve("A", s.ipA+":443", &leaf, &s.rawA)
	serve("A-plain", s.ipA+":80", nil, nil)
	serve("B", s.ipB+":443", &leaf, nil)
	bad, err := otherCA.Leaf(nameC)
	if err != nil {
		t.Fatal(err)
	}
	serve("C", s.ipC+":443", bad, nil)

	var pc net.PacketConn
	if err := inNetNS(ns, func() (err error) { pc, err = net.ListenPacket("udp4", s.ipDNS+":53"); return err }); err != nil {
		t.Fatal(err)
	}
	answers := map[string]string{nameA + ".": s.ipA, nameB + ".": s.ipB, nameC + ".": s.ipC, nameE + ".": s.ipA}
	cnames := map[string]string{nameD + ".": nameA + "."}
	dnsSrv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg).SetReply(r)
		q := r.Question[0]
		name := strings.ToLower(q.Name)
		if target, ok := cnames[name]; ok {
			rr, _ := dns.NewRR(q.Name + " 60 IN CNAME " + target)
			m.Answer = append(m.Answer, rr)
			name = target
		}
		if a, ok := answers[name]; ok && q.Qtype == dns.TypeA {
			rr, _ := dns.NewRR(name + " 60 IN A " + a)
			m.Answer = append(m.Answer, rr)
		} else if !ok {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = dnsSrv.ActivateAndServe() }()
	t.Cleanup(func() { _ = dnsSrv.Shutdown() })
	return s
}

// handler records each request and answers: /redirect?to=URL with a 302 to
// URL, /ws with a WebSocket that says hello and echoes every text frame,
// anything else with a JSON echo of what it received.
func (s *standIn) handler(server string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		i := s.log.add(seen{server: server, host: r.Host, path: r.URL.Path, proto: r.Proto, header: r.Header.Clone(), bodyLen: n})
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
		case "/ws":
			s.websocket(w, r, server, i)
		default:
			b, _ := json.Marshal(map[string]any{"server": server, "host": r.Host, "proto": r.Proto, "headers": r.Header})
			_, _ = w.Write(b)
		}
	})
}

// websocket is a minimal RFC 6455 server: it sends "hello from <server>"
// first (server to client without waiting), then answers each text frame
// with "echo:<payload>" until a close frame.
func (s *standIn) websocket(w http.ResponseWriter, r *http.Request, server string, i int) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		http.Error(w, "not a websocket request", http.StatusBadRequest)
		return
	}
	h := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	c, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
		base64.StdEncoding.EncodeToString(h[:]) + "\r\n\r\n")
	writeFrame := func(op byte, p []byte) error {
		hdr := []byte{0x80 | op}
		switch {
		case len(p) < 126:
			hdr = append(hdr, byte(len(p)))
		case len(p) < 1<<16:
			hdr = append(hdr, 126, byte(len(p)>>8), byte(len(p)))
		default:
			hdr = binary.BigEndian.AppendUint64(append(hdr, 127), uint64(len(p)))
		}
		_, _ = rw.Write(hdr)
		_, _ = rw.Write(p)
		return rw.Flush()
	}
	if writeFrame(1, []byte("hello from "+server)) != nil {
		return
	}
	for {
		op, p, err := readWSFrame(rw.Reader)
		if err != nil || op == 8 {
			_ = writeFrame(8, nil)
			return
		}
		s.log.addFrame(i, string(p))
		if writeFrame(1, append([]byte("echo:"), p...)) != nil {
			return
		}
	}
}

// readWSFrame reads one (client, masked) frame.
func readWSFrame(r *bufio.Reader) (byte, []byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > 1<<20 {
		return 0, nil, io.ErrShortBuffer
	}
	var mask [4]byte
	if h[1]&0x80 != 0 {
		if _, err := io.ReadFull(r, mask[:]); err != nil {
			return 0, nil, err
		}
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, err
	}
	for i := range p {
		p[i] ^= mask[i%4]
	}
	return h[0] & 0x0f, p, nil
}
