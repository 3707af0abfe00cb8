package guest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// The wake port: the host wakes the agent with one small UDP datagram
// instead of a signal through the runtime (`runsc kill` spawns a Go process:
// ~10 ms of CPU, but seconds of wall time on a loaded host). The agent
// listens on WakePort/udp on every IPv4 address of the sandbox, from its
// start and across freeze, checkpoint and restore, and acts on a datagram
// whose payload is exactly one of the Wake* messages, echoing it back to
// the sender once it has acted. Everything else is ignored. Both effects are
// harmless whoever sends them (a process inside the sandbox can): a thaw
// only reopens listeners early, an OOM wake-up is one burst of the guard's
// checks. (UDP 49982 inside the sandbox; the daemon's API listens on TCP
// 49982 on the host by default, an unrelated port in another namespace.)
const (
	WakePort = 49982
	// WakeThaw asks the agent to listen again after a restore (what
	// SIGUSR1 does).
	WakeThaw = "airlock-wake thaw"
	// WakeOOM wakes the agent's OOM guard (what SIGUSR2 does).
	WakeOOM = "airlock-wake oom"
)

// Timing of Wake.
const (
	// WakeResend is how often the datagram is sent again while no echo came
	// (UDP may be dropped; a restored sandbox may not read yet).
	WakeResend = 25 * time.Millisecond
	// wakeRefusals is how many "port unreachable" answers end Wake: an
	// agent without the wake port (an image paused by an older build).
	// More than one, so that a stack still coming up does not count.
	wakeRefusals = 4
)

// Errors of Wake; the caller falls back to a signal.
var (
	// ErrWakeRefused: the sandbox answered that nothing listens on the wake
	// port (an agent older than the wake port).
	ErrWakeRefused = errors.New("nothing listens on the agent's wake port")
	// ErrWakeNoAnswer: no echo came before the deadline.
	ErrWakeNoAnswer = errors.New("the agent did not answer the wake datagram")
)

// Wake sends msg (WakeThaw or WakeOOM) to the agent at addr's wake port,
// again every WakeResend, until the agent echoes it (nil: it acted), the
// sandbox answers "port unreachable" several times (ErrWakeRefused), or
// timeout passes (ErrWakeNoAnswer). A cancelled ctx returns ctx's error.
func Wake(ctx context.Context, addr netip.Addr, msg string, timeout time.Duration) error {
	return WakeAt(ctx, netip.AddrPortFrom(addr.Unmap(), WakePort), msg, timeout)
}

// WakeAt is Wake to another port than WakePort (tests).
func WakeAt(ctx context.Context, addr netip.AddrPort, msg string, timeout time.Duration) error {
	if !addr.Addr().IsValid() {
		return errors.New("waking the agent: no guest address")
	}
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// A connected socket: the kernel passes up only datagrams from the
	// agent's address and port, and reports ICMP errors as ECONNREFUSED.
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return fmt.Errorf("waking the agent at %s: %w", addr, err)
	}
	defer c.Close()
	buf := make([]byte, 64)
	refused := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%w (%s, %v)", ErrWakeNoAnswer, addr, timeout)
		}
		if _, err := c.Write([]byte(msg)); err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("waking the agent at %s: %w", addr, err)
		}
		tick := time.Now().Add(WakeResend)
		if tick.After(deadline) {
			tick = deadline
		}
		_ = c.SetReadDeadline(tick)
		for {
			n, err := c.Read(buf)
			if err == nil {
				if string(buf[:n]) == msg {
					return nil
				}
				continue
			}
			if errors.Is(err, syscall.ECONNREFUSED) {
				if refused++; refused >= wakeRefusals {
					return fmt.Errorf("%w (%s)", ErrWakeRefused, addr)
				}
				continue // read on until the tick: no burst of sends
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			return fmt.Errorf("waking the agent at %s: %w", addr, err)
		}
	}
}
