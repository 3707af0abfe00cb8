package freeze

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHexPortAndState(t *testing.T) {
	if got := hexPort("0100007F:C33F"); got != 49983 {
		t.Fatalf("hexPort = %d", got)
	}
	if got := hexPort("00000000000000000000000000000000:0050"); got != 80 {
		t.Fatalf("hexPort v6 = %d", got)
	}
	if got := hexPort("garbage"); got != -1 {
		t.Fatalf("hexPort garbage = %d", got)
	}
	if tcpState("0a") != "LISTEN" || tcpState("06") != "TIME_WAIT" || tcpState("ZZ") != "ZZ" {
		t.Fatal("tcpState names")
	}
}

// table writes a /proc/net/tcp style file with the given "local remote st" rows.
func table(t *testing.T, rows ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("  sl  local_address rem_address   st tx_queue rx_queue\n")
	for i, r := range rows {
		fmt.Fprintf(&b, "%4d: %s 00000000:00000000\n", i, r)
	}
	p := filepath.Join(t.TempDir(), "tcp")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

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
	// Only the /freeze connection itself (its local port is the server's).
	f.tcpTables = nil
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

func TestFreezeRefusedWithForeignSockets(t *testing.T) {
	f := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	addr, _ := serve(t, f)
	// A foreign listener on port 8000 (0x1F40) in the table.
	f.tcpTables = []string{table(t, "0100007F:1F40 00000000:0000 0A")}
	start := time.Now()
	code, resp := freezeOnce(t, addr)
	if code != http.StatusConflict || !strings.Contains(resp, "port 8000 (state LISTEN)") {
		t.Fatalf("freeze = %d %q", code, resp)
	}
	if time.Since(start) < DrainTimeout {
		t.Fatal("refused before the drain timeout")
	}
	// Thawed again: it serves.
	var err error
	for i := 0; i < 100; i++ {
		var res *http.Response
		if res, err = http.Get("http://" + addr + "/"); err == nil {
			res.Body.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("not serving after a refused freeze: %v", err)
	}
}
