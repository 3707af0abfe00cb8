//go:build linux

package network

import (
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ti-mo/conntrack"
)

// fakeCT is a conntrack listener like ti-mo/conntrack's: one worker that
// hands over events and, when it fails, its error on an unbuffered
// channel (waiting for a reader, whatever Close does), and a Close that
// waits for the worker.
type fakeCT struct {
	quit, fail, exited chan struct{}
	closeOnce          sync.Once
	closed             bool // under fakeCTs.mu
	set                *fakeCTs
}

func (c *fakeCT) Close() error {
	c.closeOnce.Do(func() { close(c.quit) })
	<-c.exited
	c.set.mu.Lock()
	c.closed = true
	c.set.mu.Unlock()
	return nil
}

// fakeCTs opens fakeCTs and knows which are still open.
type fakeCTs struct {
	mu     sync.Mutex
	opened []*fakeCT
}

func (s *fakeCTs) listen(events chan conntrack.Event) (ctConn, chan error, error) {
	c := &fakeCT{quit: make(chan struct{}), fail: make(chan struct{}), exited: make(chan struct{}), set: s}
	errs := make(chan error)
	go func() {
		defer close(c.exited)
		for {
			select {
			case <-c.quit:
				return
			case <-c.fail:
				errs <- errors.New("fake receive error") // ti-mo/conntrack: not abandoned on Close
				return
			case events <- conntrack.Event{}:
			}
		}
	}()
	s.mu.Lock()
	s.opened = append(s.opened, c)
	s.mu.Unlock()
	return c, errs, nil
}

func (s *fakeCTs) open() (open, all int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.opened {
		if !c.closed {
			open++
		}
	}
	return open, len(s.opened)
}

// TestFlowEndsCloseWhileRelistening: a listener's worker fails at the
// moment the reader is closed (the daemon shutting down). Whichever comes
// first, close returns, the reader has stopped, and no listener is left
// open: the one relisten opens after close is closed by relisten (before,
// it could be installed after close had closed the old one, and stay open
// with its worker blocked on a channel no one reads).
func TestFlowEndsCloseWhileRelistening(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	relistened := 0
	for i := range 300 {
		cts := &fakeCTs{}
		fe := newFlowEnds(netip.MustParsePrefix("10.0.0.0/24"), cts.listen, log)
		c, errs, _ := fe.listen(fe.events)
		fe.lis.put(c)
		q := make(chan endedFlow, 1)
		go fe.read(errs, func(conntrack.Event) (endedFlow, bool) { return endedFlow{}, true }, q) // q fills: drops
		// The worker fails and the reader is closed at the same time;
		// every third round the close waits a little, so the reader is
		// inside relisten (or past it) when close comes.
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); close(c.(*fakeCT).fail) }()
		go func() {
			defer wg.Done()
			if i%3 == 1 {
				time.Sleep(time.Duration(i%50) * time.Microsecond)
			}
			fe.close()
		}()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: close did not return within 10 s", i)
		}
		select {
		case <-fe.stopped:
		default:
			t.Fatalf("round %d: close returned before the reader stopped", i)
		}
		open, all := cts.open()
		if open != 0 {
			t.Fatalf("round %d: %d of %d listeners left open after close", i, open, all)
		}
		if all > 1 {
			relistened++
		}
	}
	t.Logf("the reader relistened in %d of 300 rounds", relistened)
	if relistened == 0 {
		t.Error("no round reached relisten: the race was not exercised")
	}
}

// current is the installed listener.
func (l *ctListener) current() ctConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conn
}
