//go:build linux

package interpreter

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/envd/oomguard"
)

func TestDiedError(t *testing.T) {
	killed := exec.Command("sleep", "30")
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	_ = killed.Process.Signal(syscall.SIGKILL)
	_ = killed.Wait()
	err := died(killed, oomguard.KernelOOMKills())
	var de *DiedError
	if !errors.Is(err, ErrDied) || !errors.As(err, &de) || de.Signal != "killed" || de.OOM {
		t.Errorf("SIGKILL without an OOM kill: %#v (%v), want signal killed, not OOM", de, err)
	}
	// The kernel's OOM kill count grew during the execution (this host's
	// count stands in for a guest kernel's).
	if n := oomguard.KernelOOMKills(); n > 0 {
		if err := died(killed, n-1); !errors.As(err, &de) || !de.OOM {
			t.Errorf("SIGKILL with a new kernel OOM kill: %v, want OOM", err)
		}
	}
	exited := exec.Command("sh", "-c", "exit 3")
	_ = exited.Run()
	if err := died(exited, 0); !errors.As(err, &de) || de.Signal != "" || de.OOM || err.Error() != "kernel died" {
		t.Errorf("plain exit: %v", err)
	}
}
