package freeze

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

// serve starts f serving a trivial handler (plus /freeze) on a loopback port.
func serve(t *testing.T, f *Freezer) (addr string, done chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == Path {
			f.ServeHTTP(w, r)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})}
	done = make(chan error, 1)
	go func() { done <- f.Serve(srv, ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), done
}

// freezeOnce posts /freeze on a fresh connection, reads the answer, then
// resets the connection like the daemon does.
func freezeOnce(t *testing.T, addr string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = c.(*net.TCPConn).SetLinger(0)
		_ = c.Close()
	}()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", Path)
	buf := make([]byte, 4096)
	n, _ := c.Read(buf)
	resp := string(buf[:n])
	var code int
	fmt.Sscanf(resp, "HTTP/1.1 %d", &code)
	return code, resp
}

func TestFreezeThawCycle(t *testing.T) {
	f := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	addr, _ := serve(t, f)
	_, port, _ := net.SplitHostPort(addr)
	code, resp := freezeOnce(t, addr)
	if code != http.StatusNoContent {
		t.Fatalf("freeze = %d %q", code, resp)
	}
	if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("listener still accepting while frozen")
	}
	f.Thaw()
	var err error
	for i := 0; i < 100; i++ {
		var res *http.Response
		res, err = http.Get("http://127.0.0.1:" + port + "/")
		if err == nil {
			res.Body.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("not listening again after thaw: %v", err)
	}
}

// TestFreezeWithOtherSockets: a server of the sandbox (here: another
// listener of this process) and an open agent connection do not refuse the
// freeze any more; the agent connection is waited for, at most
// DrainTimeout, then the freeze answers 204. (Refusing with 409 was a
// workaround for gVisor 20221219, which could not save such sockets.)
func TestFreezeWithOtherSockets(t *testing.T) {
	f := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	addr, _ := serve(t, f)
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	// An agent connection the "host" never closes.
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	deadline := time.Now().Add(2 * time.Second)
	for f.openConns() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	code, resp := freezeOnce(t, addr)
	if code != http.StatusNoContent {
		t.Fatalf("freeze = %d %q", code, resp)
	}
	if took := time.Since(start); took < DrainTimeout-100*time.Millisecond {
		t.Fatalf("answered after %v, before the agent connection was given DrainTimeout", took)
	}
	// Frozen: the agent's listener is closed.
	if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("listener still accepting while frozen")
	}
	f.Thaw()
	for i := 0; i < 100; i++ {
		var res *http.Response
		if res, err = http.Get("http://" + addr + "/"); err == nil {
			res.Body.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("not serving after thaw: %v", err)
	}
}

// TestThawWaitListens: once ThawWait returns, the listener accepts at once
// (the host's first health check after the wake-up's answer succeeds).
func TestThawWaitListens(t *testing.T) {
	f := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	addr, _ := serve(t, f)
	for i := 0; i < 5; i++ {
		if code, resp := freezeOnce(t, addr); code != http.StatusNoContent {
			t.Fatalf("freeze %d = %d %q", i, code, resp)
		}
		f.ThawWait(time.Second)
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Fatalf("cycle %d: not listening when ThawWait returned: %v", i, err)
		}
		c.Close()
	}
}

// TestEarlyThawKeepsServing: a thaw right after the freeze, before the
// server noticed its listener closed (a wake datagram that a process of the
// sandbox sent), reopens the listener instead of ending the server.
func TestEarlyThawKeepsServing(t *testing.T) {
	f := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	addr, done := serve(t, f)
	for i := 0; i < 50; i++ {
		if err := f.freeze(); err != nil {
			t.Fatal(err)
		}
		f.Thaw()
	}
	f.ThawWait(time.Second)
	select {
	case err := <-done:
		t.Fatalf("server ended after an early thaw: %v", err)
	default:
	}
	res, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("not serving after early thaws: %v", err)
	}
	res.Body.Close()
}
