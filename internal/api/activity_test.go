package api

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/activity"
)

// stuckWriter is a client that stops reading: every Write after the first
// blocks until release is closed.
type stuckWriter struct {
	h       http.Header
	mu      sync.Mutex
	buf     bytes.Buffer
	writes  int
	release chan struct{}
}

func (w *stuckWriter) Header() http.Header { return w.h }
func (w *stuckWriter) WriteHeader(int)     {}
func (w *stuckWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.writes++
	n := w.writes
	w.mu.Unlock()
	if n > 1 {
		<-w.release
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}

// TestActivityStreamSlowClientDropped: a client that stops reading does not
// block the producers; once the daemon gets through to it, its stream
// ends with a "lagged" entry naming the last id it was sent.
func TestActivityStreamSlowClientDropped(t *testing.T) {
	hub := activity.New(nil, activity.Options{})
	a := &api{opts: Options{Activity: hub}}
	w := &stuckWriter{h: http.Header{}, release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := httptest.NewRequest(http.MethodGet, "/sandboxes/s/activity", nil).WithContext(ctx)
	done := make(chan struct{})
	go func() {
		a.activityStream(w, r, hub, "s", 0, nil)
		close(done)
	}()
	for deadline := time.Now().Add(10 * time.Second); hub.Subscribers("s") == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stream did not subscribe")
		}
	}
	published := make(chan struct{})
	go func() {
		for i := 0; i < 3*activity.SubBuffer; i++ {
			hub.Publish("s", "process.start", map[string]any{"i": i})
		}
		close(published)
	}()
	select {
	case <-published:
	case <-time.After(10 * time.Second):
		t.Fatal("publishing blocked on a client that does not read")
	}
	if hub.Subscribers("s") != 0 {
		t.Fatal("the slow client is still subscribed")
	}
	close(w.release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end")
	}
	out := w.buf.String()
	if !strings.Contains(out, `"type":"lagged"`) || !strings.Contains(out, `"lastId":`) {
		t.Fatalf("no lagged entry at the end of the stream: ...%s", out[max(0, len(out)-300):])
	}
	if strings.Contains(out, "id: 3072\n") {
		t.Fatal("the dropped client got every entry")
	}
}
