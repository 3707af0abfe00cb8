package sandbox

import "testing"

// TestBackgroundDuringClose starts background work while Close waits for
// earlier work, as a resume's image drop can during a shutdown: a
// WaitGroup's Add from zero concurrent with Wait is a misuse that -race
// reports (seen in a moved test). Work started after close still runs.
func TestBackgroundDuringClose(t *testing.T) {
	for i := 0; i < 300; i++ {
		m := &Manager{}
		release, ran, waited := make(chan struct{}), make(chan struct{}), make(chan struct{})
		m.background(func() { <-release })
		go func() {
			m.mu.Lock()
			m.closed = true
			m.mu.Unlock()
			m.bg.Wait()
			close(waited)
		}()
		go m.background(func() { close(ran) })
		close(release)
		<-waited
		<-ran
	}
}
