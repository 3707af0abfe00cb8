package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
)

// A node's stream reaches the client chunk by chunk: the client reads the
// first chunk while the node still holds the response open.
func TestStreamNotBuffered(t *testing.T) {
	c := newTestCluster(t, 1)
	c.store.sandboxes["sb1"] = "n1"
	release := make(chan struct{})
	done := make(chan struct{})
	c.nodes["n1"].handle = func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		w.Header().Set("Content-Type", "application/connect+json")
		_, _ = io.WriteString(w, "chunk-1\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		_, _ = io.WriteString(w, "chunk-2\n")
	}
	resp := c.do("POST", "/process.Process/Start", false, nil, "E2b-Sandbox-Id", "sb1")
	defer resp.Body.Close()
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(resp.Body).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if l != "chunk-1\n" {
			t.Fatalf("read %q", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first chunk did not arrive while the node held the stream open")
	}
	select {
	case <-done:
		t.Fatal("the node finished before the client read the first chunk")
	default:
	}
	close(release)
	<-done
}

// An Upgrade (WebSocket: the PTY and the console terminal) passes both
// ways.
func TestUpgrade(t *testing.T) {
	c := newTestCluster(t, 2)
	c.store.sandboxes["sb1"] = "n2"
	c.nodes["n2"].handle = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want an upgrade", http.StatusBadRequest)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" + cluster.HeaderNode + ": n2\r\n\r\n")
		_ = rw.Flush()
		l, _ := rw.ReadString('\n')
		_, _ = rw.WriteString("echo " + l)
		_ = rw.Flush()
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(c.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(conn, "GET /console/api/sandboxes/sb1/pty HTTP/1.1\r\nHost: api.example.com\r\nX-API-Key: "+testKey+
		"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get(cluster.HeaderNode) != "n2" {
		t.Fatalf("upgrade: %d %v", resp.StatusCode, resp.Header)
	}
	_, _ = io.WriteString(conn, "hello\n")
	l, err := br.ReadString('\n')
	if err != nil || l != "echo hello\n" {
		t.Fatalf("read %q, %v", l, err)
	}
}
