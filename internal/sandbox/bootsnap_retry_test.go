package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

// A boot snapshot whose making fails once (an interpreter warm-up that a slow
// guest missed) is tried again; one that cannot be served is not; the tries
// are bounded.
func TestRetryBoot(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	transient := errors.New("waiting for the interpreter's warm contexts: connection refused")
	cases := []struct {
		name      string
		errs      []error
		wantCalls int
		wantErr   error
	}{
		{"fails once then works", []error{transient, nil}, 2, nil},
		{"always fails", []error{transient, transient, transient, transient}, 3, transient},
		{"nothing warm to keep", []error{errNoWarmState}, 1, errNoWarmState},
		{"not served", []error{errNotServed}, 1, errNotServed},
		{"works at once", []error{nil}, 1, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			hash, err := retryBoot(ctx, 3, time.Millisecond, log, "tpl", func() (string, error) {
				e := c.errs[calls]
				calls++
				return "h", e
			})
			if calls != c.wantCalls || !errors.Is(err, c.wantErr) || (c.wantErr == nil && err != nil) || hash != "h" {
				t.Fatalf("calls %d err %v hash %q; want calls %d err %v", calls, err, hash, c.wantCalls, c.wantErr)
			}
		})
	}
	cctx, cancel := context.WithCancel(ctx)
	calls := 0
	_, err := retryBoot(cctx, 3, time.Hour, log, "tpl", func() (string, error) {
		calls++
		cancel()
		return "", transient
	})
	if calls != 1 || !errors.Is(err, transient) {
		t.Fatalf("a cancelled start: calls %d err %v; want 1 call", calls, err)
	}
}
