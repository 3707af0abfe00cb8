package daemon

import (
	"io"
	"sync"
)

// logQueueMax bounds what the log writer holds for its output: past it,
// a record waits for the output to catch up (memory stays bounded).
const logQueueMax = 4 << 20

// logWriter is the daemon log's output (issue 24). Write queues the record
// and returns; one goroutine writes the queue to the output, in order. A
// write to a log file dirties the page cache, and on a host that writes a
// lot (sandbox layers copied, runtime images restored: the daemon itself
// copies layers) the kernel throttles a task that dirties pages
// (balance_dirty_pages): in the 20-client soak each log line written on a
// kill's answer path held it 0.3–0.65 s, while the kill's own work took
// under a millisecond. A request that logs must not wait for the disk.
//
// What is queued when the process dies of SIGKILL is lost (the writer is
// normally a few records behind at most); Close, when the daemon stops,
// writes it.
type logWriter struct {
	out  io.Writer
	wake chan struct{} // one pending wake-up for run
	done chan struct{} // closed when run returned

	mu     sync.Mutex
	room   sync.Cond // signalled when the queue was taken, or closed
	queue  []byte    // records not yet written, in order
	closed bool      // Close was called: Write writes through
}

func newLogWriter(out io.Writer) *logWriter {
	l := &logWriter{out: out, wake: make(chan struct{}, 1), done: make(chan struct{})}
	l.room.L = &l.mu
	go l.run()
	return l
}

// Write queues p (a whole record: slog writes one per call) and returns.
func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	for len(l.queue) >= logQueueMax && !l.closed {
		l.room.Wait()
	}
	if l.closed {
		l.mu.Unlock()
		return l.out.Write(p)
	}
	l.queue = append(l.queue, p...)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

// run writes the queue until Close.
func (l *logWriter) run() {
	defer close(l.done)
	var spare []byte
	for range l.wake {
		l.mu.Lock()
		batch := l.queue
		l.queue = spare[:0]
		closed := l.closed
		l.room.Broadcast()
		l.mu.Unlock()
		if len(batch) > 0 {
			_, _ = l.out.Write(batch) // nowhere to report a failed log write
		}
		spare = batch
		if closed {
			return
		}
	}
}

// Close writes what is queued and makes later writes go straight to the
// output.
func (l *logWriter) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	l.room.Broadcast()
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	<-l.done
}
