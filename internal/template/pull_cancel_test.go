package template

import (
	"context"
	"testing"
	"time"
)

// A Get that arrives while an abandoned pull is still winding down joins the
// cancelled call and fails with context.Canceled though its own ctx is fine.
func TestPullAfterACancelledPullStartsAnew(t *testing.T) {
	ctx := context.Background()
	st := newFakeStore()
	b, _ := newLocalBackend(t)
	a, bn := newNode(t, st, b), newNode(t, st, b)
	base, err := a.m.Build(ctx, "base", BuildOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	b.mu.Lock()
	b.gate = gate
	b.mu.Unlock()
	c1, cancel1 := context.WithCancel(ctx)
	done1 := make(chan error, 1)
	go func() { _, err := bn.m.Get(c1, "base"); done1 <- err }()
	time.Sleep(100 * time.Millisecond) // blocked in Open on the gate
	cancel1()
	<-done1
	done2 := make(chan error, 1)
	go func() { _, err := bn.m.Get(ctx, base.Hash); done2 <- err }()
	time.Sleep(100 * time.Millisecond)
	close(gate)
	if err := <-done2; err != nil {
		t.Fatalf("second Get (live ctx) failed: %v", err)
	}
}
