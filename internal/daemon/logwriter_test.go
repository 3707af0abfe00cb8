package daemon

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"
)

// gateWriter blocks every Write until open is closed, then records it.
type gateWriter struct {
	open chan struct{}
	mu   sync.Mutex
	got  bytes.Buffer
}

func (g *gateWriter) Write(p []byte) (int, error) {
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.got.Write(p)
}

// A record is queued and Write returns while the output is stuck; Close
// writes everything, in order.
func TestLogWriterDoesNotWaitForItsOutput(t *testing.T) {
	g := &gateWriter{open: make(chan struct{})}
	l := newLogWriter(g)
	var want bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 1000 {
			line := fmt.Sprintf("record %d\n", i)
			want.WriteString(line)
			if _, err := l.Write([]byte(line)); err != nil {
				t.Error(err)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Write waited for a stuck output")
	}
	close(g.open)
	l.Close()
	if g.got.String() != want.String() {
		t.Fatalf("output after Close has %d bytes, want the %d written, in order", g.got.Len(), want.Len())
	}
	// After Close, writes go straight through.
	if _, err := l.Write([]byte("late\n")); err != nil || !bytes.HasSuffix(g.got.Bytes(), []byte("late\n")) {
		t.Errorf("write after Close: %v, output ends %q", err, g.got.Bytes()[max(0, g.got.Len()-20):])
	}
}

// Past logQueueMax a record waits for the output (memory stays bounded).
func TestLogWriterBounded(t *testing.T) {
	g := &gateWriter{open: make(chan struct{})}
	l := newLogWriter(g)
	big := bytes.Repeat([]byte("x"), logQueueMax)
	if _, err := l.Write(big); err != nil { // fills the queue (run may take it and block on the gate)
		t.Fatal(err)
	}
	if _, err := l.Write(big); err != nil { // taken by now, or waits: run is stuck on the gate with the first
		t.Fatal(err)
	}
	blocked := make(chan struct{})
	go func() {
		defer close(blocked)
		_, _ = l.Write([]byte("more\n"))
	}()
	select {
	case <-blocked:
		t.Fatal("a write past the bound returned while the output was stuck")
	case <-time.After(200 * time.Millisecond):
	}
	close(g.open)
	<-blocked
	l.Close()
	if n := g.got.Len(); n != 2*logQueueMax+len("more\n") {
		t.Errorf("output has %d bytes, want %d", n, 2*logQueueMax+len("more\n"))
	}
}
