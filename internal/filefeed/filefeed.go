// Package filefeed is the activity feed's file-event limiter (issue 28
// part 2), shared by the guest agent, which applies it to the feed's watch
// before anything leaves the sandbox, and the host (internal/activity),
// which applies it to an older agent's raw stream and keeps the
// sandbox-wide rate cap.
//
// Rules: one write per path per Window (the first one; later writes to the
// path inside the window are left out, a delete or rename of the path ends
// its window); creates, renames and deletes always pass the coalescing;
// then at most Rate events per second (a fixed one-second window started by
// the first event after the previous one ended), beyond which events are
// counted as dropped and the count is returned with the next event kept, to
// be reported before it.
package filefeed

import "time"

// Defaults (the feed's documented limits).
const (
	Window = time.Second
	Rate   = 200
	// maxWriteTimes bounds the per-path write times remembered.
	maxWriteTimes = 4096
)

// Kind is a file event kind the feed reports.
type Kind int

// The kinds.
const (
	Create Kind = iota + 1
	Write
	Rename
	Delete
)

// Limiter applies the rules above. The zero value is ready (Window, Rate).
// Not safe for concurrent use.
type Limiter struct {
	// NoCoalesce turns the per-path write coalescing off (the host, behind
	// an agent that coalesced already, keeps only the rate cap).
	NoCoalesce bool

	lastWrite  map[string]time.Time
	rateWindow time.Time
	count      int
	dropped    int
}

// Add reports whether an event of kind k on path at now is kept; when it is,
// dropped is how many events the rate cap left out before it (report them
// first). extraDropped adds events already dropped upstream to the count.
func (l *Limiter) Add(now time.Time, k Kind, path string, extraDropped int) (keep bool, dropped int) {
	l.dropped += extraDropped
	if !l.NoCoalesce {
		switch k {
		case Write:
			if t, ok := l.lastWrite[path]; ok && now.Sub(t) < Window && now.Sub(t) >= 0 {
				return false, 0
			}
			if l.lastWrite == nil || len(l.lastWrite) >= maxWriteTimes {
				l.lastWrite = map[string]time.Time{}
			}
			l.lastWrite[path] = now
		case Delete, Rename:
			delete(l.lastWrite, path)
		}
	}
	if now.Sub(l.rateWindow) >= time.Second || now.Before(l.rateWindow) {
		l.rateWindow, l.count = now, 0
	}
	if l.count >= Rate {
		l.dropped++
		return false, 0
	}
	l.count++
	dropped, l.dropped = l.dropped, 0
	return true, dropped
}

// Full reports whether the rate cap's current window is used up at now
// (every event until the window ends is dropped, whatever it is) and, if
// so, when the window ends.
func (l *Limiter) Full(now time.Time) (until time.Time, full bool) {
	if l.count < Rate || now.Sub(l.rateWindow) >= time.Second || now.Before(l.rateWindow) {
		return time.Time{}, false
	}
	return l.rateWindow.Add(time.Second), true
}

// Header is the request header with which the feed's watch (WatchDir) asks
// the agent to apply the Limiter before sending; an agent that does echoes
// it in the response headers (an older agent ignores it and sends every
// event: the host then applies the Limiter itself). SDK watches never send
// it and get every event, as E2B specifies.
const Header = "Airlock-Feed-Coalesce"

// A coalescing agent reports the events its rate cap left out as a
// FilesystemEvent of type EVENT_TYPE_UNSPECIFIED with an empty name and
// the count in entry.size, sent right before the next event kept.
