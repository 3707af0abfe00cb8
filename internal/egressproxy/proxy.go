package egressproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Proxy is the node's transparent interception proxy. Connections reach it
// already steered (nftables) from a sandbox to a domain that has rules;
// HandleConn gets each with the sandbox's rules and the original
// destination.
type Proxy struct {
	CA *CA
	// RootCAs verify upstream servers (nil: the system roots).
	RootCAs *x509.CertPool
	// Resolve returns a secret's value by name (secrets.Service.Resolve).
	Resolve func(ctx context.Context, name string) ([]byte, error)
	// Dial opens the upstream TCP connection (nil: net.Dialer).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	Log  *slog.Logger
	// HandshakeTimeout bounds each TLS handshake, from the connection's
	// accept to the sandbox's Finished, the upstream's included (0: 30 s;
	// an emulated microVM's client under load took more than 10 s).
	HandshakeTimeout time.Duration
	// IdleTimeout is how long a verified upstream connection is kept for
	// the same sandbox's next connection to the same name (0:
	// DefaultIdleTimeout; negative: never kept). MaxIdle and
	// MaxIdlePerKey bound them (0: the defaults).
	IdleTimeout   time.Duration
	MaxIdle       int
	MaxIdlePerKey int

	pool upstreams
}

// Target is what HandleConn needs to know of a steered connection.
type Target struct {
	Sandbox string
	// Addr is the original destination (ip:port) the sandbox dialled.
	Addr  string
	Rules Rules
	// Route names how upstream connections are dialled for this sandbox
	// (its egressProxy; "" when direct): connections are reused only on
	// the same route.
	Route string
}

func (p *Proxy) log() *slog.Logger {
	if p.Log != nil {
		return p.Log
	}
	return slog.Default()
}

func (p *Proxy) dial(ctx context.Context, addr string) (net.Conn, error) {
	if p.Dial != nil {
		return p.Dial(ctx, "tcp", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

func (p *Proxy) timeout() time.Duration {
	if p.HandshakeTimeout > 0 {
		return p.HandshakeTimeout
	}
	return 30 * time.Second
}

// HandleConn serves one steered connection and closes it. A TLS
// connection whose SNI is a ruled domain is terminated, re-originated with
// verification against that name, and its HTTP/1.1 requests transformed.
// Anything else (plain HTTP, another SNI, no SNI) is relayed byte for byte
// to the original destination, untouched: a secret never goes in the clear.
func (p *Proxy) HandleConn(ctx context.Context, c net.Conn, t Target) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(p.timeout()))
	sni, prefix, err := peekSNI(c)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil && len(prefix) == 0 {
		return
	}
	client := &prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(prefix), c)}
	domain := strings.ToLower(strings.TrimSuffix(sni, "."))
	if _, ruled := t.Rules[domain]; sni == "" || !ruled {
		p.tunnel(ctx, client, t.Addr)
		return
	}
	p.intercept(ctx, client, domain, t)
}

// tunnel relays c to addr unchanged.
func (p *Proxy) tunnel(ctx context.Context, c net.Conn, addr string) {
	up, err := p.dial(ctx, addr)
	if err != nil {
		p.log().Debug("egress proxy: dial", "addr", addr, "err", err)
		return
	}
	defer up.Close()
	pipe(c, up)
}

func (p *Proxy) intercept(ctx context.Context, c net.Conn, domain string, t Target) {
	log := p.log().With("sandbox", t.Sandbox, "domain", domain)
	key := upstreamKey{sandbox: t.Sandbox, addr: t.Addr, name: domain, route: t.Route}
	hctx, cancel := context.WithTimeout(ctx, p.timeout())
	defer cancel()
	var up *upConn
	srv := tls.Server(c, &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			// Verify the real server before finishing the sandbox's
			// handshake: a bad upstream certificate fails the sandbox's
			// handshake too, before any request (or secret) is sent. An
			// idle connection of this sandbox to this name was verified
			// so when it was opened.
			if up = p.getIdle(key); up == nil {
				var err error
				if up, err = p.dialUpstream(hctx, key); err != nil {
					return nil, err
				}
			}
			leaf, err := p.CA.Leaf(domain)
			if err != nil {
				return nil, err
			}
			// HTTP/1.1 only: no h2, so there is no :authority to check.
			return &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}, nil
		},
	})
	err := srv.HandshakeContext(hctx)
	if err != nil {
		if up != nil {
			up.c.Close()
		}
		log.Info("egress proxy: handshake refused", "err", err)
		return
	}
	ackNow(c)
	up, reusable := p.serveHTTP(ctx, log, srv, up, key, t.Rules)
	if up == nil {
		return
	}
	if reusable {
		p.putIdle(key, up)
		return
	}
	up.c.Close()
}

// dialUpstream opens a verified TLS connection to k's destination for k's
// name (resuming a session of the same sandbox when it can: the resumed
// session's certificate was verified for this name).
func (p *Proxy) dialUpstream(ctx context.Context, k upstreamKey) (*upConn, error) {
	raw, err := p.dial(ctx, k.addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", k.addr, err)
	}
	uc := tls.Client(raw, &tls.Config{ServerName: k.name, RootCAs: p.RootCAs, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12,
		ClientSessionCache: p.sessionCacheFor(k.sandbox, k.route)})
	if err := uc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("upstream %s (%s): %w", k.name, k.addr, err)
	}
	up := &upConn{c: uc}
	up.r = bufio.NewReaderSize(countingReader{uc, &up.got}, 64<<10)
	return up, nil
}

// serveHTTP relays HTTP/1.1 requests from client to up, transforming those
// whose Host is the domain, until either side closes or upgrades. It
// returns the upstream connection it ended with (nil: none open), and
// whether that is at a clean request boundary, reusable by the same
// sandbox.
func (p *Proxy) serveHTTP(ctx context.Context, log *slog.Logger, client net.Conn, up *upConn, key upstreamKey, rules Rules) (*upConn, bool) {
	domain := key.name
	cr := bufio.NewReader(client)
	// Writes to the sandbox are coalesced (a chunk's size line, data and
	// CRLF in one TLS record, not three) and flushed whenever the next
	// read from upstream may block, so streaming is never held back.
	cw := bufio.NewWriterSize(client, 64<<10)
	for {
		req, err := http.ReadRequest(cr)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				writeStatus(client, http.StatusBadRequest, "egress proxy: malformed request")
				return up, false
			}
			return up, true
		}
		host := req.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if !strings.EqualFold(strings.TrimSuffix(host, "."), domain) {
			// The TLS name was checked, this Host was not: never send a
			// domain's secret under another name.
			writeStatus(client, http.StatusMisdirectedRequest, "egress proxy: Host "+req.Host+" differs from the TLS server name "+domain)
			return up, false
		}
		if err := p.transform(ctx, req, domain, rules); err != nil {
			log.Warn("egress proxy: transform failed", "method", req.Method, "path", req.URL.Path, "err", err)
			writeStatus(client, http.StatusBadGateway, "egress proxy: a secret of this rule is unavailable")
			return up, false
		}
		req.RequestURI = ""
		// A sandbox's "Connection: close" closes its own connection after
		// the answer, not the upstream one, which stays reusable.
		clientClose := req.Close
		if req.Close && strings.EqualFold(strings.TrimSpace(req.Header.Get("Connection")), "close") && len(req.Header.Values("Connection")) == 1 {
			req.Close = false
			req.Header.Del("Connection")
		}
		// Expect: 100-continue is answered here: the sandbox's client
		// would wait for a 100 before sending the body that req.Write
		// reads (curl sends it for bodies over 1 MiB), so the body is
		// asked for at once and sent upstream without the expectation.
		if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
			req.Header.Del("Expect")
			if _, err := cw.WriteString("HTTP/1.1 100 Continue\r\n\r\n"); err != nil || cw.Flush() != nil {
				return up, false
			}
		}
		got := up.got
		resp, err := roundTrip(up, req, cw)
		if err != nil && up.reused && noBody(req) && up.got == got {
			// The idle connection was closed by the server meanwhile and
			// nothing of the request was answered: send it again on a
			// new verified connection.
			up.c.Close()
			if up, err = p.dialUpstream(ctx, key); err != nil {
				log.Info("egress proxy: upstream", "err", err)
				writeStatus(client, http.StatusBadGateway, "egress proxy: upstream unavailable")
				return nil, false
			}
			resp, err = roundTrip(up, req, cw)
		}
		up.reused = false
		if err != nil {
			writeStatus(client, http.StatusBadGateway, "egress proxy: bad upstream response")
			return up, false
		}
		// Redirects and everything else go back as they are: the proxy
		// never follows one.
		if resp.StatusCode == http.StatusSwitchingProtocols {
			if err := resp.Write(cw); err != nil || cw.Flush() != nil {
				return up, false
			}
			upgraded(client, cr, up.c, up.r)
			return up, false
		}
		upClose := resp.Close || req.Close
		if clientClose {
			resp.Close = true // answered with Connection: close
		}
		body := resp.Body
		resp.Body = io.NopCloser(&flushBeforeBlock{r: body, ur: up.r, w: cw})
		// writerOnly hides cw's ReadFrom: it would read the body into cw's
		// own buffer, which flushBeforeBlock's Flush empties under it (the
		// response head went out again as the body).
		err = resp.Write(writerOnly{cw})
		if err == nil {
			err = cw.Flush()
		}
		body.Close()
		if err != nil || upClose {
			return up, false
		}
		if clientClose {
			return up, true
		}
	}
}

// roundTrip writes req to up and reads its final response.
func roundTrip(up *upConn, req *http.Request, cw *bufio.Writer) (*http.Response, error) {
	if err := req.Write(up.c); err != nil {
		return nil, err
	}
	return readFinalResponse(up.r, req, cw)
}

func noBody(req *http.Request) bool { return req.Body == nil || req.Body == http.NoBody }

// readFinalResponse reads req's response from ur, passing informational
// ones (100 Continue, 103 Early Hints) on to w as they come: the final
// response (or a 101) is returned, never a 1xx that would leave the final
// one unread.
func readFinalResponse(ur *bufio.Reader, req *http.Request, w *bufio.Writer) (*http.Response, error) {
	for {
		resp, err := http.ReadResponse(ur, req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode < 100 || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
		// A 1xx has no body; its head goes on as it is.
		if _, err := fmt.Fprintf(w, "HTTP/1.1 %s\r\n", resp.Status); err != nil {
			return nil, err
		}
		if err := resp.Header.Write(w); err != nil {
			return nil, err
		}
		if _, err := w.WriteString("\r\n"); err != nil {
			return nil, err
		}
		if err := w.Flush(); err != nil {
			return nil, err
		}
	}
}

// transform applies the matching rules to req, filling placeholders.
func (p *Proxy) transform(ctx context.Context, req *http.Request, domain string, rules Rules) error {
	for _, r := range rules.Match(domain, req.Method, req.URL.Path) {
		for k, v := range r.Transform.Headers {
			val, err := Expand(ctx, v, p.Resolve)
			if err != nil {
				return err
			}
			if !httpguts.ValidHeaderFieldValue(val) {
				return fmt.Errorf("header %s: a secret's value is not a valid header value", k)
			}
			req.Header.Set(canonicalHeader(k), val)
		}
		if len(r.Transform.Query) > 0 {
			q := req.URL.Query()
			for k, v := range r.Transform.Query {
				val, err := Expand(ctx, v, p.Resolve)
				if err != nil {
					return err
				}
				q.Set(k, val)
			}
			req.URL.RawQuery = q.Encode()
		}
	}
	return nil
}

func writeStatus(w io.Writer, code int, msg string) {
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(msg)+1, msg+"\n")
}

// flushBeforeBlock flushes w before a read of r that may wait on ur.
type flushBeforeBlock struct {
	r  io.Reader
	ur *bufio.Reader
	w  *bufio.Writer
}

// writerOnly is an io.Writer and nothing else (no io.ReaderFrom).
type writerOnly struct{ io.Writer }

// Read must not be given a slice of w's buffer (w.ReadFrom does that): the
// Flush would empty the buffer the read is filling.
func (f *flushBeforeBlock) Read(p []byte) (int, error) {
	if f.ur.Buffered() == 0 && f.w.Buffered() > 0 {
		if err := f.w.Flush(); err != nil {
			return 0, err
		}
	}
	return f.r.Read(p)
}

// upgraded relays an upgraded (WebSocket) connection both ways.
func upgraded(client net.Conn, cr *bufio.Reader, up net.Conn, ur *bufio.Reader) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = io.Copy(up, cr); closeWrite(up) }()
	go func() { defer wg.Done(); _, _ = io.Copy(client, ur); closeWrite(client) }()
	wg.Wait()
}

func pipe(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = io.Copy(b, a); closeWrite(b) }()
	go func() { defer wg.Done(); _, _ = io.Copy(a, b); closeWrite(a) }()
	wg.Wait()
}

func closeWrite(c net.Conn) {
	type cw interface{ CloseWrite() error }
	if pc, ok := c.(*prefixConn); ok {
		c = pc.Conn
	}
	if x, ok := c.(cw); ok {
		_ = x.CloseWrite()
		return
	}
	_ = c.Close()
}

// prefixConn reads the peeked bytes before the rest of the connection.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// peekSNI reads a TLS ClientHello from c and returns its server name and
// every byte read (to replay). Non-TLS input gives "" and the bytes.
func peekSNI(c net.Conn) (string, []byte, error) {
	rec := &recordingConn{Conn: c}
	var sni string
	errDone := errors.New("done")
	err := tls.Server(rec, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		sni = h.ServerName
		return nil, errDone
	}}).Handshake()
	if errors.Is(err, errDone) {
		return sni, rec.buf.Bytes(), nil
	}
	return "", rec.buf.Bytes(), err
}

// recordingConn records what is read and writes nothing (so the peek's
// handshake sends no alert).
type recordingConn struct {
	net.Conn
	buf bytes.Buffer
}

func (r *recordingConn) Read(b []byte) (int, error) {
	n, err := r.Conn.Read(b)
	r.buf.Write(b[:n])
	return n, err
}

func (r *recordingConn) Write(b []byte) (int, error) { return len(b), nil }
