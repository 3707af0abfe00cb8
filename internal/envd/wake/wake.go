// Package wake is the agent's wake port: the host wakes the agent with one
// small UDP datagram (internal/guest.Wake) instead of a signal sent through
// the runtime (`runsc kill`, a Go process of its own: seconds of wall time
// on a loaded host). The agent binds the port on every IPv4 address when it
// starts and keeps it across freeze, checkpoint and restore (gVisor saves a
// bound UDP endpoint with the sandbox), so that a restored agent reads the
// host's "thaw" as soon as its Sentry runs.
//
// A datagram whose payload is exactly one of the handled messages
// (guest.WakeThaw, guest.WakeOOM) runs its action and is echoed back to its
// sender, which tells the host it took effect; anything else is ignored and
// answered with nothing. Any process of the sandbox can send to the port,
// so every action must be harmless when repeated or sent by a stranger:
// a thaw of an agent that is not frozen does nothing, one during a freeze
// reopens the listeners early (the sandbox's own code can only disturb its
// own checkpoint), and an OOM wake-up is one burst of the guard's checks.
// The port is host → guest only: the host's firewall drops what a sandbox
// sends to the host unless it answers a flow the host opened.
package wake

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"
)

// maxMessage bounds a datagram that can match: longer ones are junk.
const maxMessage = 64

// Listen binds UDP port on every IPv4 address of the sandbox.
func Listen(port int) (*net.UDPConn, error) {
	return net.ListenUDP("udp4", &net.UDPAddr{Port: port})
}

// Serve reads datagrams from conn until ctx ends or conn is closed (then it
// closes conn and returns nil). A datagram whose payload equals a key of on
// runs that function, then is echoed to its sender.
func Serve(ctx context.Context, conn net.PacketConn, on map[string]func(), log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	buf := make([]byte, maxMessage+1)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				_ = conn.Close()
				return nil
			}
			// A transient error (an ICMP error queued on the socket by an
			// earlier echo): never spin on it.
			log.Debug("wake port: read", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if n > maxMessage {
			continue
		}
		act, ok := on[string(buf[:n])]
		if !ok || act == nil {
			continue
		}
		act()
		if _, err := conn.WriteTo(buf[:n], from); err != nil {
			log.Debug("wake port: echo", "to", from, "err", err)
		}
	}
}
