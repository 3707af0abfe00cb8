//go:build linux

package network

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vishvananda/netlink"
)

func TestRetryDump(t *testing.T) {
	calls := 0
	got, err := retryDump(func() (int, error) {
		calls++
		if calls < 3 {
			return 0, fmt.Errorf("dump: %w", netlink.ErrDumpInterrupted)
		}
		return 42, nil
	})
	if err != nil || got != 42 || calls != 3 {
		t.Fatalf("got %d, %v after %d calls; want 42 after 3", got, err, calls)
	}
	boom := errors.New("boom")
	calls = 0
	if _, err := retryDump(func() (int, error) { calls++; return 0, boom }); !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("other errors must not be retried: %v after %d calls", err, calls)
	}
	calls = 0
	if _, err := retryDump(func() (int, error) { calls++; return 0, netlink.ErrDumpInterrupted }); !errors.Is(err, netlink.ErrDumpInterrupted) || calls != 5 {
		t.Fatalf("an always-interrupted dump: %v after %d calls", err, calls)
	}
}
