package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// goneCheckInterval is how often an in-flight proxied request checks that
// its sandbox still exists.
var goneCheckInterval = time.Second

// errSandboxGone cancels proxied requests whose sandbox was released while
// they were in flight.
var errSandboxGone = errors.New("sandbox is gone")

// cancelWhenGone returns a context derived from ctx that is cancelled with
// errSandboxGone once the resolver stops knowing sandbox t (killed, timed
// out, or reaped after its agent died). Without it a request streaming from
// a sandbox that died would hang: the sandbox's network namespace is removed
// and the peer never answers or resets the connection. Call stop when the
// request is done.
func (p *proxy) cancelWhenGone(ctx context.Context, t Target) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		tk := time.NewTicker(goneCheckInterval)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			if cur, ok := p.res.Lookup(t.ID); !ok || cur.Addr != t.Addr {
				p.log.Info("sandbox went away during a proxied request; cancelling it", "sandbox", t.ID, "found", ok)
				cancel(errSandboxGone)
				return
			}
		}
	}()
	return ctx, func() { close(done); cancel(nil) }
}

// goneDuringRequest reports whether ctx was cancelled because its sandbox went away.
func goneDuringRequest(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errSandboxGone)
}

// addrOwners remembers which sandbox last used each guest address. Guest
// addresses are reused when a network slot is freed; a keep-alive connection
// pooled for the previous owner would otherwise be reused for the new one,
// and the first request (usually a non-retryable POST) would fail with a
// reset or EOF from a peer that never had that connection.
type addrOwners struct {
	mu sync.Mutex
	m  map[netip.Addr]string
}

// claim records t as the owner of its address and, when the address changed
// hands, closes the transport's idle connections before t is proxied to.
func (o *addrOwners) claim(t Target, tr http.RoundTripper) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[netip.Addr]string{}
	}
	prev, ok := o.m[t.Addr]
	if ok && prev == t.ID {
		return
	}
	o.m[t.Addr] = t.ID
	if !ok {
		return
	}
	if c, ok := tr.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections() // under mu: no request to t can pick a stale one meanwhile
	}
}
