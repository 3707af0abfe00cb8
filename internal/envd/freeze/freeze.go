// Package freeze prepares the agent for a checkpoint of its sandbox.
//
// gVisor (runsc 20221219) cannot save a TCP endpoint that an epoll instance
// watches ("endpoint still has waiters upon save"), nor one on eth0 in a
// connected or TIME_WAIT state, and a refused save stops the sandbox. Go's
// network poller registers every socket with epoll, so before a checkpoint
// the agent closes its listeners, waits until the host has reset (RST) all
// its connections, checks that no other process holds a TCP socket, and
// answers. After the restore the daemon sends SIGUSR1 (Thaw) and the agent
// listens again on the same addresses.
package freeze

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Path is the agent endpoint the daemon calls (the proxy never forwards it).
const Path = "/freeze"

// Defaults.
const (
	// DrainTimeout bounds the wait for connections to close.
	DrainTimeout = 3 * time.Second
	// AutoThaw reopens the listeners when no checkpoint/thaw follows.
	AutoThaw = 30 * time.Second
)

// Freezer owns the agent's HTTP servers and their listeners.
type Freezer struct {
	log *slog.Logger
	// tcpTables are the files listing the sandbox's TCP sockets.
	tcpTables []string

	// mu guards servers, frozen and thawed.
	mu      sync.Mutex
	servers []*served
	frozen  bool
	thawed  chan struct{} // closed by Thaw; replaced on every freeze
	timer   *time.Timer
}

type served struct {
	network, addr string
	srv           *http.Server
	ln            net.Listener
	conns         atomic.Int64 // open connections (new..closed/hijacked)
}

// New returns a Freezer.
func New(log *slog.Logger) *Freezer {
	if log == nil {
		log = slog.Default()
	}
	return &Freezer{log: log, thawed: make(chan struct{}), tcpTables: []string{"/proc/net/tcp", "/proc/net/tcp6"}}
}

// Serve serves srv on ln until srv is shut down or closed, re-listening on
// ln's address after every freeze/thaw cycle. It sets srv.ConnState.
func (f *Freezer) Serve(srv *http.Server, ln net.Listener) error {
	s := &served{network: ln.Addr().Network(), addr: ln.Addr().String(), srv: srv, ln: ln}
	prev := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.conns.Add(-1)
		}
		if prev != nil {
			prev(c, st)
		}
	}
	f.mu.Lock()
	f.servers = append(f.servers, s)
	f.mu.Unlock()
	for {
		err := srv.Serve(ln)
		f.mu.Lock()
		frozen, thawed := f.frozen, f.thawed
		f.mu.Unlock()
		if errors.Is(err, http.ErrServerClosed) || !frozen {
			return err
		}
		<-thawed
		for {
			ln, err = net.Listen(s.network, s.addr)
			if err == nil {
				break
			}
			f.log.Warn("re-listening after thaw", "addr", s.addr, "err", err)
			time.Sleep(50 * time.Millisecond)
		}
		f.mu.Lock()
		s.ln = ln
		f.mu.Unlock()
		f.log.Info("listening again after thaw", "addr", s.addr)
	}
}

// Thaw reopens the listeners after a freeze (no-op when not frozen).
func (f *Freezer) Thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.frozen {
		return
	}
	f.frozen = false
	if f.timer != nil {
		f.timer.Stop()
	}
	close(f.thawed)
}

// freeze closes every listener and arms the automatic thaw.
func (f *Freezer) freeze() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen {
		return errors.New("already frozen")
	}
	f.frozen = true
	f.thawed = make(chan struct{})
	for _, s := range f.servers {
		_ = s.ln.Close()
	}
	f.timer = time.AfterFunc(AutoThaw, func() {
		f.log.Warn("no checkpoint followed the freeze; listening again")
		f.Thaw()
	})
	return nil
}

func (f *Freezer) openConns() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int64
	for _, s := range f.servers {
		n += s.conns.Load()
	}
	return n
}

// ServeHTTP handles POST /freeze. It hijacks its own connection, closes the
// listeners, waits for the other connections to go away and for the daemon
// to reset this one after reading the answer: 204 when the sandbox can be
// checkpointed, 409 {code,message} (and thawed again) when it cannot.
func (f *Freezer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "cannot hijack", http.StatusInternalServerError)
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	status, msg := http.StatusNoContent, ""
	if err := f.freeze(); err != nil {
		status, msg = http.StatusConflict, err.Error()
	} else if err := f.drain(r.Context(), conn); err != nil {
		f.Thaw()
		status, msg = http.StatusConflict, err.Error()
	}
	var body []byte
	if msg != "" {
		body, _ = json.Marshal(map[string]any{"code": status, "message": msg})
	}
	fmt.Fprintf(brw, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
	_ = brw.Flush()
	// Let the daemon close (reset) first: closing here would leave a
	// TIME_WAIT endpoint in the guest.
	_ = conn.SetReadDeadline(time.Now().Add(DrainTimeout))
	_, _ = io.Copy(io.Discard, conn)
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
}

// drain waits until no agent connection but self is open and no TCP socket
// other than self's exists in the sandbox.
func (f *Freezer) drain(ctx context.Context, self net.Conn) error {
	deadline := time.Now().Add(DrainTimeout)
	var others []string
	for {
		n := f.openConns()
		var err error
		others, err = tcpSockets(f.tcpTables, self)
		if err != nil {
			return err
		}
		if n == 0 && len(others) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if n > 0 {
				others = append(others, fmt.Sprintf("%d agent connection(s) still open", n))
			}
			return fmt.Errorf("sandbox has open TCP sockets that gVisor cannot checkpoint: %s", strings.Join(others, ", "))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tcpSockets lists the TCP sockets of the sandbox (from /proc/net/tcp and
// tcp6, which gVisor fills from its socket table) other than self.
func tcpSockets(tables []string, self net.Conn) ([]string, error) {
	selfLocal, selfRemote := portOf(self.LocalAddr()), portOf(self.RemoteAddr())
	var out []string
	for _, p := range tables {
		fh, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		sc := bufio.NewScanner(fh)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 {
				continue
			}
			lp, rp := hexPort(fields[1]), hexPort(fields[2])
			if lp == selfLocal && rp == selfRemote {
				continue
			}
			out = append(out, fmt.Sprintf("port %d (state %s)", lp, tcpState(fields[3])))
		}
		fh.Close()
	}
	return out, nil
}

func portOf(a net.Addr) int {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.Port
	}
	return -1
}

// hexPort parses the port of "ADDR:PORT" in /proc/net/tcp notation.
func hexPort(s string) int {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return -1
	}
	v, err := strconv.ParseUint(s[i+1:], 16, 16)
	if err != nil {
		return -1
	}
	return int(v)
}

func tcpState(hex string) string {
	names := map[string]string{"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1",
		"05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}
	if n, ok := names[strings.ToUpper(hex)]; ok {
		return n
	}
	return hex
}
