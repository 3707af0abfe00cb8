package gateway

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Defaults of the per-client limit on what unauthenticated requests make
// the api tier do (issue 23, M3 and L7): store reads for a route the cache
// lacks, moves and resumes of paused sandboxes, header-less signed /files
// lookups. Traffic to a sandbox whose route is cached costs nothing and is
// not limited; nor is a request with the API key.
const (
	DefaultUnauthRate  = 50 // per second and client address
	DefaultUnauthBurst = 200
	// limiterIdle: a client's bucket is forgotten after this long unused.
	limiterIdle = 10 * time.Minute
)

// clientLimiter is a token bucket per client IP address (the peer of the
// connection: behind a balancer, the balancer's; set the limits for it).
type clientLimiter struct {
	rate  rate.Limit
	burst int

	mu      sync.Mutex
	clients map[string]*clientBucket // guarded by mu
	swept   time.Time                // guarded by mu
}

type clientBucket struct {
	lim  *rate.Limiter
	used time.Time
}

func newClientLimiter(r rate.Limit, burst int) *clientLimiter {
	return &clientLimiter{rate: r, burst: burst, clients: map[string]*clientBucket{}}
}

// clientIP is r's peer address without its port.
func clientIP(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// allow takes one token from ip's bucket at now; false: none left.
func (l *clientLimiter) allow(ip string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) > limiterIdle {
		for k, b := range l.clients {
			if now.Sub(b.used) > limiterIdle {
				delete(l.clients, k)
			}
		}
		l.swept = now
	}
	b, ok := l.clients[ip]
	if !ok {
		b = &clientBucket{lim: rate.NewLimiter(l.rate, l.burst)}
		l.clients[ip] = b
	}
	b.used = now
	return b.lim.AllowN(now, 1)
}

// allowUnauth reports whether r, an unauthenticated request about to cost
// the api tier a store read or a move, may go on; if not, it has answered
// 429. A request with the API key is never limited.
func (g *Gateway) allowUnauth(w http.ResponseWriter, r *http.Request, what string) bool {
	if g.key.Authorized(r) {
		return true
	}
	ip := clientIP(r)
	if g.unauth.allow(ip, time.Now()) {
		return true
	}
	w.Header().Set("Retry-After", "1")
	writeError(w, r, http.StatusTooManyRequests, fmt.Sprintf(
		"too many unauthenticated requests from %s: %s refused (limit %g a second, burst %d; requests with the API key and to sandboxes already routed are not limited)",
		ip, what, float64(g.unauth.rate), g.unauth.burst))
	return false
}
