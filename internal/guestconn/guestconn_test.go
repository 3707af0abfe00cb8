package guestconn

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

func TestAbortResets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	tr := New(time.Second)
	ip := netip.MustParseAddr("127.0.0.1")
	for i := 0; i < 2; i++ {
		if _, err := tr.DialContext(context.Background(), "tcp", ln.Addr().String()); err != nil {
			t.Fatal(err)
		}
	}
	if n := tr.Count(ip); n != 2 {
		t.Fatalf("Count = %d, want 2", n)
	}
	srv := <-accepted
	<-accepted
	if n := tr.Abort(ip); n != 2 {
		t.Fatalf("Abort = %d, want 2", n)
	}
	if n := tr.Count(ip); n != 0 {
		t.Fatalf("Count after abort = %d", n)
	}
	_ = srv.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = srv.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("peer read after abort = %v, want ECONNRESET (a RST, not a FIN)", err)
	}
	if err == io.EOF {
		t.Fatal("graceful close instead of a reset")
	}
}
