package middleware

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Request timing (issue 24, debug level only): where an API request's time
// goes inside the daemon, from the read that returned its first bytes to the
// write of its answer. TimingListener wraps the server's connections so that
// each knows when its current request was read and when its answer was
// written; Timing, around a handler, adds the handler's entry and return and
// logs one "request timing" line per request once its answer was written
// (net/http writes a small answer only after the handler returned: its
// buffer is flushed then). The line's fields:
//
//   - read_at, write_at: wall clock, Unix microseconds, of the read that
//     returned the request's first bytes and of the answer's first write
//     (a client on the same host compares them with its own clock);
//   - to_handler: read → the handler's entry (net/http parsing the request,
//     the middleware in front of Timing, the goroutine's scheduling);
//   - handler: the handler's entry → its return;
//   - to_write: the handler's return → the answer's first write (0 when the
//     handler wrote or flushed before it returned);
//   - status is not known to Timing (it does not wrap the ResponseWriter,
//     so the proxy's streaming and hijacking are untouched).
//
// The cost when off: nothing (the daemon installs neither below debug).

// TimingListener wraps ln's connections for Timing.
func TimingListener(ln net.Listener) net.Listener { return timingListener{ln} }

type timingListener struct{ net.Listener }

func (l timingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &timedConn{Conn: c}, nil
}

// TimingConnContext is the http.Server's ConnContext for Timing: it puts
// the connection (or the one under its TLS) into the request contexts.
func TimingConnContext(ctx context.Context, c net.Conn) context.Context {
	if u, ok := c.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		c = u.NetConn()
	}
	if tc, ok := c.(*timedConn); ok {
		return context.WithValue(ctx, timedConnKey{}, tc)
	}
	return ctx
}

type timedConnKey struct{}

// timedConn records, per request (HTTP/1: one at a time on a connection),
// when its first bytes were read and when its answer was first written.
type timedConn struct {
	net.Conn

	mu      sync.Mutex
	readAt  time.Time      // the current request's first read with data
	writeAt time.Time      // the first write after readAt (zero: none yet)
	pending *requestTiming // a handler returned, its answer not yet written
}

func (c *timedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		now := time.Now()
		c.mu.Lock()
		// A read after the previous answer's write starts the next request
		// (a body read while the handler runs does not).
		if c.readAt.IsZero() || !c.writeAt.IsZero() {
			c.readAt, c.writeAt = now, time.Time{}
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *timedConn) Write(p []byte) (int, error) {
	now := time.Now()
	c.mu.Lock()
	if c.writeAt.IsZero() {
		c.writeAt = now
	}
	t := c.pending
	c.pending = nil
	c.mu.Unlock()
	n, err := c.Conn.Write(p)
	if t != nil {
		t.log(now)
	}
	return n, err
}

func (c *timedConn) Close() error {
	c.mu.Lock()
	t := c.pending
	c.pending = nil
	c.mu.Unlock()
	if t != nil {
		t.log(time.Time{})
	}
	return c.Conn.Close()
}

// requestTiming is one request's times, logged once its answer was written.
type requestTiming struct {
	logger            *slog.Logger
	method, path, id  string
	read, entry, done time.Time
}

func (t *requestTiming) log(write time.Time) {
	toWrite := time.Duration(0)
	if write.After(t.done) {
		toWrite = write.Sub(t.done)
	}
	var writeAt int64
	if !write.IsZero() {
		writeAt = write.UnixMicro()
	}
	toHandler := time.Duration(0)
	var readAt int64
	if !t.read.IsZero() {
		toHandler = t.entry.Sub(t.read)
		readAt = t.read.UnixMicro()
	}
	t.logger.Debug("request timing", "method", t.method, "path", t.path, "request", t.id,
		"read_at", readAt, "write_at", writeAt, "to_handler", toHandler,
		"handler", t.done.Sub(t.entry), "to_write", toWrite)
}

// Timing logs each request's timing at debug level (see above) when its
// connection came from TimingListener; otherwise it only calls next.
func Timing(logger *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(timedConnKey{}).(*timedConn)
		if c == nil || r.ProtoMajor != 1 {
			next.ServeHTTP(w, r)
			return
		}
		entry := time.Now()
		c.mu.Lock()
		read := c.readAt
		c.mu.Unlock()
		next.ServeHTTP(w, r)
		t := &requestTiming{logger: logger, method: r.Method, path: r.URL.Path,
			id: w.Header().Get(HeaderRequestID), read: read, entry: entry, done: time.Now()}
		c.mu.Lock()
		if write := c.writeAt; !write.IsZero() { // written (or flushed) already
			c.mu.Unlock()
			t.log(write)
			return
		}
		c.pending = t
		c.mu.Unlock()
	})
}
