package egressproxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"os"
	"sync"
	"time"
)

// Bounds of the upstream caches (doc.go, "Reuse").
const (
	// DefaultIdleTimeout is how long an idle upstream connection is kept.
	DefaultIdleTimeout = 30 * time.Second
	// DefaultMaxIdle bounds the idle upstream connections of the node.
	DefaultMaxIdle = 256
	// DefaultMaxIdlePerKey bounds them per (sandbox, destination, name,
	// route).
	DefaultMaxIdlePerKey = 4
	// sessionTTL is how long a sandbox's TLS session cache outlives its
	// last use; maxSessionCaches bounds how many sandboxes have one.
	sessionTTL       = 10 * time.Minute
	maxSessionCaches = 4096
	sessionsPerCache = 32
)

// upstreamKey is what an upstream connection may be reused for: the same
// sandbox (never another: it carried this sandbox's secrets), the same
// original destination, TLS name and route (the sandbox's egressProxy).
type upstreamKey struct {
	sandbox, addr, name, route string
}

// upConn is a verified TLS connection to the real server, with the
// reader the proxy parses its responses from.
type upConn struct {
	c *tls.Conn
	r *bufio.Reader
	// reused: taken from the idle pool (it may have been closed by the
	// server meanwhile).
	reused bool
	// got counts the bytes of answers read (a request is sent again only
	// if none of its answer came).
	got int64
}

type countingReader struct {
	r io.Reader
	n *int64
}

func (c countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	*c.n += int64(n)
	return n, err
}

type idleUpstream struct {
	up    *upConn
	timer *time.Timer
}

// upstreams holds the idle upstream connections and the per-sandbox TLS
// session caches. The zero value is ready; its limits are the Proxy's.
type upstreams struct {
	mu       sync.Mutex
	idle     map[upstreamKey][]*idleUpstream
	nIdle    int
	sessions map[string]*sessionCache // by sandbox and route
}

type sessionCache struct {
	tls.ClientSessionCache
	last time.Time
}

func (p *Proxy) idleTimeout() time.Duration {
	if p.IdleTimeout != 0 {
		return p.IdleTimeout
	}
	return DefaultIdleTimeout
}

func (p *Proxy) maxIdle() (total, perKey int) {
	total, perKey = p.MaxIdle, p.MaxIdlePerKey
	if total == 0 {
		total = DefaultMaxIdle
	}
	if perKey == 0 {
		perKey = DefaultMaxIdlePerKey
	}
	return total, perKey
}

// sessionCacheFor returns the TLS session cache of a sandbox and route:
// upstream session tickets are not shared between sandboxes either (a
// ticket would let the server link them).
func (p *Proxy) sessionCacheFor(sandbox, route string) tls.ClientSessionCache {
	u := &p.pool
	u.mu.Lock()
	defer u.mu.Unlock()
	now := time.Now()
	k := sandbox + "\x00" + route
	if s, ok := u.sessions[k]; ok {
		s.last = now
		return s
	}
	if u.sessions == nil {
		u.sessions = map[string]*sessionCache{}
	}
	if len(u.sessions) >= maxSessionCaches {
		for k, s := range u.sessions {
			if now.Sub(s.last) > sessionTTL {
				delete(u.sessions, k)
			}
		}
		for k := range u.sessions { // still full: drop any
			if len(u.sessions) < maxSessionCaches {
				break
			}
			delete(u.sessions, k)
		}
	}
	s := &sessionCache{ClientSessionCache: tls.NewLRUClientSessionCache(sessionsPerCache), last: now}
	u.sessions[k] = s
	return s
}

// getIdle returns a live idle upstream connection for k, or nil.
func (p *Proxy) getIdle(k upstreamKey) *upConn {
	u := &p.pool
	for {
		u.mu.Lock()
		list := u.idle[k]
		if len(list) == 0 {
			u.mu.Unlock()
			return nil
		}
		e := list[len(list)-1]
		if len(list) == 1 {
			delete(u.idle, k)
		} else {
			u.idle[k] = list[:len(list)-1]
		}
		u.nIdle--
		u.mu.Unlock()
		if !e.timer.Stop() {
			continue // its timer is closing it
		}
		if alive(e.up) {
			e.up.reused = true
			return e.up
		}
		e.up.c.Close()
	}
}

// alive reports whether an idle connection is still open and quiet: the
// server has neither closed it nor sent anything unasked.
func alive(up *upConn) bool {
	if up.r.Buffered() > 0 {
		return false
	}
	if err := up.c.SetReadDeadline(time.Now()); err != nil {
		return false
	}
	_, err := up.r.Peek(1)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	return up.c.SetReadDeadline(time.Time{}) == nil
}

// putIdle keeps up for reuse under k, or closes it when the pool is full.
func (p *Proxy) putIdle(k upstreamKey, up *upConn) {
	total, perKey := p.maxIdle()
	u := &p.pool
	u.mu.Lock()
	if p.idleTimeout() < 0 || u.nIdle >= total || len(u.idle[k]) >= perKey {
		u.mu.Unlock()
		up.c.Close()
		return
	}
	up.reused = false
	e := &idleUpstream{up: up}
	e.timer = time.AfterFunc(p.idleTimeout(), func() { p.dropIdle(k, e) })
	if u.idle == nil {
		u.idle = map[upstreamKey][]*idleUpstream{}
	}
	u.idle[k] = append(u.idle[k], e)
	u.nIdle++
	u.mu.Unlock()
}

func (p *Proxy) dropIdle(k upstreamKey, e *idleUpstream) {
	u := &p.pool
	u.mu.Lock()
	list := u.idle[k]
	for i, x := range list {
		if x == e {
			list = append(list[:i], list[i+1:]...)
			u.nIdle--
			break
		}
	}
	if len(list) == 0 {
		delete(u.idle, k)
	} else {
		u.idle[k] = list
	}
	u.mu.Unlock()
	e.up.c.Close()
}

// idleCount is the number of idle upstream connections (tests).
func (p *Proxy) idleCount() int {
	p.pool.mu.Lock()
	defer p.pool.mu.Unlock()
	return p.pool.nIdle
}
