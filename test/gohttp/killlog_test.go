//go:build e2e

package gohttp

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestKillAnswersWhileTheLogIsStuck: a kill does not wait for its log lines
// to be written (issue 24). Under load the kernel throttles the daemon's
// writes to its log file for up to seconds; here the daemon's log output is
// a pipe that nobody reads, filled up after a sandbox was created, so every
// write to it blocks. The kill must still answer, and the sandbox be gone.
// (Before the daemon's log went through a queue, the kill's "sandbox
// killed" line blocked it for as long as the pipe stayed full.)
func TestKillAnswersWhileTheLogIsStuck(t *testing.T) {
	e := loadEnv(t)
	fifo := filepath.Join(t.TempDir(), "daemon.log")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Opened for reading (and never read) before the daemon opens it for
	// writing, so that open does not block.
	reader, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: the env comes back, then a daemon with the
	// usual log replaces the stuck one, then the pipe closes (a daemon
	// still writing to it would get SIGPIPE).
	t.Cleanup(func() { reader.Close() })
	t.Cleanup(func() { restartDaemon(t, e, func() {}) })
	t.Setenv("AIRLOCK_E2E_DAEMON_LOG", fifo)
	restartDaemon(t, e, func() {})

	s := e.createV1(t, 300, nil)

	// Fill the pipe: from now on every write of the daemon to its log
	// blocks until someone reads, which nobody does.
	// A raw descriptor: an *os.File would wait in the poller on EAGAIN.
	filler, err := syscall.Open(fifo, syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(filler)
	chunk := make([]byte, 4096)
	for i := range chunk {
		chunk[i] = '.'
	}
	for {
		if _, err := syscall.Write(filler, chunk); err != nil {
			if !errors.Is(err, syscall.EAGAIN) {
				t.Fatalf("filling the log pipe: %v", err)
			}
			break
		}
	}
	if _, err := syscall.Write(filler, []byte{'\n'}); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("the log pipe is not full: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, e.apiURL+"/sandboxes/"+s.SandboxID, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", e.apiKey)
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("DELETE while the daemon's log output was stuck: %v after %v (the kill waits for its log lines)", err, time.Since(t0))
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE with the log stuck: %s, want 204", resp.Status)
	}
	t.Logf("kill answered in %v with the log stuck", time.Since(t0))
	e.requireGone(t, s.SandboxID)
}
