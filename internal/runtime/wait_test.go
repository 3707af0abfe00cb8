package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// stateRT is a Runtime whose State is set by the test.
type stateRT struct {
	Runtime
	mu     sync.Mutex
	state  State
	err    error
	reason string
}

func (r *stateRT) State(context.Context, string) (State, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state, r.err
}

func (r *stateRT) StopReason(string) string { return r.reason }

func (r *stateRT) Caps() Caps { return Caps{StopReasoner: r} }

func (r *stateRT) set(st State, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state, r.err = st, err
}

// blockUntilDone is an agent that never answers.
func blockUntilDone(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestWaitReady(t *testing.T) {
	ctx := context.Background()
	rt := &stateRT{state: StateRunning, reason: "its virtual machine exited"}
	if err := WaitReady(ctx, rt, "a", "", time.Millisecond, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("ready agent: %v", err)
	}
	boom := errors.New("boom")
	if err := WaitReady(ctx, rt, "a", "", time.Millisecond, func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("failing agent wait: %v, want boom", err)
	}

	// The sandbox stops while the agent is awaited: a StoppedError at once,
	// with the reason and the log's last lines, and the agent wait ended.
	log := filepath.Join(t.TempDir(), "console.log")
	if err := os.WriteFile(log, []byte(strings.Repeat("x", 3000)+"\nboot line\nqemu: could not open /dev/net/tun: Permission denied\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		rt.set(StateStopped, nil)
	}()
	ended := make(chan struct{})
	t0 := time.Now()
	err := WaitReady(ctx, rt, "a", log, 10*time.Millisecond, func(ctx context.Context) error {
		defer close(ended)
		return blockUntilDone(ctx)
	})
	var se *StoppedError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a StoppedError", err)
	}
	if time.Since(t0) > 2*time.Second {
		t.Errorf("noticed after %s", time.Since(t0))
	}
	select {
	case <-ended:
	default:
		t.Error("the agent wait was not ended")
	}
	msg := err.Error()
	for _, want := range []string{"its virtual machine exited", "boot line | qemu: could not open /dev/net/tun: Permission denied"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if len(se.LogTail) > 1100 {
		t.Errorf("log tail of %d bytes, want it bounded", len(se.LogTail))
	}

	// Gone from the runtime counts as stopped; a failed look does not.
	rt.set("", ErrNotFound)
	if err := WaitReady(ctx, rt, "a", "", time.Millisecond, blockUntilDone); !errors.As(err, &se) {
		t.Errorf("unknown sandbox: %v, want a StoppedError", err)
	}
	rt.set("", errors.New("runsc state: timeout"))
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := WaitReady(tctx, rt, "a", "", time.Millisecond, blockUntilDone); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("failing State: %v, want the agent wait's own deadline", err)
	}
}
