package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// DefaultWatchInterval is how often WaitReady asks the runtime whether the
// sandbox still runs.
const DefaultWatchInterval = 200 * time.Millisecond

// StoppedError says that a sandbox stopped (its VMM or sandbox process
// exited) before it became ready. Reason is the runtime's StopReason when
// it has one; LogTail is the end of the sandbox's console or agent log,
// which usually names the cause ("could not open /dev/net/tun: …").
type StoppedError struct {
	ID      string
	Reason  string
	LogTail string
	After   time.Duration
}

func (e *StoppedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sandbox %s stopped %s after start, before its agent answered", e.ID, e.After.Round(time.Millisecond))
	if e.Reason != "" {
		b.WriteString(": " + e.Reason)
	}
	if e.LogTail != "" {
		b.WriteString("; log: " + e.LogTail)
	}
	return b.String()
}

// WaitReady runs ready (which polls the agent until it answers or its
// context ends) while watching rt's state of sandbox id every interval (0:
// DefaultWatchInterval). It returns ready's result, or a *StoppedError the
// moment the runtime reports the sandbox stopped or gone, with the
// runtime's stop reason and the tail of logPath (may be empty), so a VMM
// that dies at start fails the create at once and in its own words instead
// of after the whole agent timeout.
func WaitReady(ctx context.Context, rt Runtime, id, logPath string, interval time.Duration, ready func(context.Context) error) error {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	start := time.Now()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ready(rctx) }()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			st, err := rt.State(ctx, id)
			if err == nil && st != StateStopped {
				continue
			}
			if err != nil && !errors.Is(err, ErrNotFound) {
				continue // a failed look is no verdict; the agent wait goes on
			}
			// One last look: the agent may have answered in the meantime.
			select {
			case err := <-done:
				if err == nil {
					return nil
				}
			default:
			}
			cancel()
			<-done
			se := &StoppedError{ID: id, After: time.Since(start), LogTail: oneLine(LogTail(logPath, 1024))}
			if sr := rt.Caps().StopReasoner; sr != nil {
				se.Reason = sr.StopReason(id)
			}
			return se
		}
	}
}

// LogTail returns up to n bytes from the end of the file at path ("" when
// it cannot be read).
func LogTail(path string, n int64) string {
	if path == "" {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		if _, err := f.Seek(-n, io.SeekEnd); err != nil {
			return ""
		}
	}
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return strings.TrimSpace(string(b))
}

// oneLine joins the non-empty lines of s with " | " (for an error message).
func oneLine(s string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " | ")
}
