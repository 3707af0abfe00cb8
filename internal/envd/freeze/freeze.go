// Package freeze prepares the agent for a checkpoint of its sandbox.
//
// Before a checkpoint the agent closes its listeners and waits (bounded)
// until the host has reset (RST) its connections, so a restored agent
// carries no half-open connection to a host that forgot it; then it
// answers. After the restore the daemon wakes the agent (Thaw) and it
// listens again on the same addresses: on gVisor with the datagram
// guest.WakeThaw to the agent's wake port, UDP 49982 (internal/envd/wake;
// its socket stays open through the freeze and is saved with the sandbox),
// and with SIGUSR1 (`runsc kill`) when that gets no answer (an agent older
// than the port) or the daemon does not know the sandbox's address. Other TCP sockets of the sandbox
// (servers, loopback and outbound connections) are the runtime's business:
// gVisor since 2023 saves listening and loopback endpoints and resets
// connections to the outside at restore, and a microVM keeps its guest
// kernel's sockets. (gVisor 20221219 could not save an endpoint watched by
// epoll; the agent then refused with 409 whenever another TCP socket
// existed.)
package freeze

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
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
	down          bool         // closed by a freeze, not listening again yet (guarded by Freezer.mu)
}

// New returns a Freezer.
func New(log *slog.Logger) *Freezer {
	if log == nil {
		log = slog.Default()
	}
	return &Freezer{log: log, thawed: make(chan struct{})}
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
		// s.down, not f.frozen: a thaw that came before this goroutine
		// looked (a wake datagram any process of the sandbox can send)
		// must not end the server.
		f.mu.Lock()
		down, thawed := s.down, f.thawed
		if errors.Is(err, http.ErrServerClosed) || !down {
			s.down = false
			f.mu.Unlock()
			return err
		}
		f.mu.Unlock()
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
		s.down = false
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

// ThawWait is Thaw, then waits (at most timeout) until every listener
// closed by the freeze listens again: the host's first health check after
// the wake-up's answer then finds the agent's port open.
func (f *Freezer) ThawWait(timeout time.Duration) {
	f.Thaw()
	deadline := time.Now().Add(timeout)
	for {
		f.mu.Lock()
		down := 0
		for _, s := range f.servers {
			if s.down {
				down++
			}
		}
		f.mu.Unlock()
		if down == 0 || !time.Now().Before(deadline) {
			return
		}
		time.Sleep(time.Millisecond)
	}
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
		s.down = true
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
// listeners, waits (up to DrainTimeout) for the other connections to go
// away and for the daemon to reset this one after reading the answer: 204,
// or 409 {code,message} when already frozen.
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
	} else {
		f.drain(r.Context())
		// The checkpoint saves every page the agent holds: hand the Go
		// heap's free pages back first (a GC, then madvise on the free
		// spans; a few milliseconds), so they are neither written to the
		// image nor restored into every sandbox made from it.
		debug.FreeOSMemory()
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

// drain waits until no agent connection but the /freeze request's own is
// open, at most DrainTimeout. Connections still open then are saved with
// the sandbox and reset by the runtime at restore; that is logged, not
// refused.
func (f *Freezer) drain(ctx context.Context) {
	deadline := time.Now().Add(DrainTimeout)
	for {
		n := f.openConns()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			f.log.Warn("agent connections still open at the checkpoint", "conns", n)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
