package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestWaitRunscBuild(t *testing.T) {
	cache := t.TempDir()
	runsc := filepath.Join(cache, "v1", "runsc")
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))

	// No build ever ran: at once.
	start := time.Now()
	waitRunscBuild(context.Background(), runsc, log)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("waited %s with no build", d)
	}

	// A build holds the lock (as lib-go-install.sh's flock): wait until it is released.
	f, err := os.Create(filepath.Join(cache, ".lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { waitRunscBuild(context.Background(), runsc, log); close(done) }()
	select {
	case <-done:
		t.Fatal("returned while the build lock was held")
	case <-time.After(700 * time.Millisecond):
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting after the build lock was released")
	}
	if !strings.Contains(logBuf.String(), "runsc is being built") {
		t.Errorf("no wait logged:\n%s", logBuf.String())
	}
}
