//go:build linux

package interpreter

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"
)

func TestDiedError(t *testing.T) {
	killed := exec.Command("sleep", "30")
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	_ = killed.Process.Signal(syscall.SIGKILL)
	_ = killed.Wait()
	err := died(killed)
	var de *DiedError
	if !errors.Is(err, ErrDied) || !errors.As(err, &de) || de.Signal != "killed" || de.OOM {
		t.Errorf("SIGKILL without an OOM kill: %#v (%v), want signal killed, not OOM", de, err)
	}
	exited := exec.Command("sh", "-c", "exit 3")
	_ = exited.Run()
	if err := died(exited); !errors.As(err, &de) || de.Signal != "" || de.OOM || err.Error() != "kernel died" {
		t.Errorf("plain exit: %v", err)
	}
}
