package filesystem

import (
	"context"
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/filefeed"
)

// flushHold is the activity feed's WatchDir response writer: connect
// flushes after every message, and each flush is a write through the
// sandbox's network stack; while held (a batch of inotify events being
// sent) flushes wait, and release sends them as one.
type flushHold struct {
	http.ResponseWriter
	held, pending bool
}

func (f *flushHold) Flush() {
	if f.held {
		f.pending = true
		return
	}
	if fl, ok := f.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}

func (f *flushHold) Unwrap() http.ResponseWriter { return f.ResponseWriter }

func (f *flushHold) hold() {
	if f != nil {
		f.held = true
	}
}

// release ends a hold, flushing what it held back.
func (f *flushHold) release() {
	if f == nil {
		return
	}
	f.held = false
	if f.pending {
		f.pending = false
		f.Flush()
	}
}

type flushHoldKey struct{}

func flushHoldFrom(ctx context.Context) *flushHold {
	f, _ := ctx.Value(flushHoldKey{}).(*flushHold)
	return f
}

// FeedFlushes wraps the Filesystem handler so that the activity feed's
// WatchDir (filefeed.Header) flushes once per batch of events rather than
// once per event. Other requests pass untouched.
func FeedFlushes(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(filefeed.Header) == "" {
			h.ServeHTTP(w, r)
			return
		}
		f := &flushHold{ResponseWriter: w}
		h.ServeHTTP(f, r.WithContext(context.WithValue(r.Context(), flushHoldKey{}, f)))
	})
}
