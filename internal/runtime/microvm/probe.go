//go:build linux

package microvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// probeOK is what the agent prints when booted with airlock.probe
// (vminit.ProbeOK).
const probeOK = "AIRLOCK-PROBE-OK"

// Probe boots a throw-away VM (no disks, no network) under accel and
// returns nil once its init - the agent - reports on the console, or an
// error saying why not within timeout. Under a software "KVM" such as PVM
// the guest kernel dies in KVM's instruction emulator, and under no
// virtualisation at all /dev/kvm is missing: both are errors for "kvm".
func Probe(ctx context.Context, qemu, kernel, agent, cacheDir, accel string, timeout time.Duration) error {
	if accel == "kvm" {
		if _, err := os.Stat("/dev/kvm"); err != nil {
			return errors.New("no /dev/kvm")
		}
	}
	initrd, err := agentInitrd(cacheDir, agent)
	if err != nil {
		return err
	}
	cpu := "max"
	if accel == "kvm" {
		cpu = "host"
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu,
		"-M", "microvm,x-option-roms=off,isa-serial=on,rtc=on,acpi=off",
		"-accel", accel, "-cpu", cpu, "-m", "128", "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		"-serial", "stdio", "-kernel", kernel, "-initrd", initrd,
		"-append", "console=ttyS0 quiet panic=-1 no_timer_check airlock.probe")
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", filepath.Base(qemu), err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if strings.Contains(out.String(), probeOK) {
				return nil
			}
			return fmt.Errorf("the probe VM ended (%v) after %s without reaching its init: %s", err, time.Since(t0).Round(time.Millisecond), lastLine(out.String()))
		case <-tick.C:
			if strings.Contains(out.String(), probeOK) {
				cancel()
				<-done
				return nil
			}
		case <-ctx.Done():
			<-done
			if strings.Contains(out.String(), probeOK) {
				return nil
			}
			return fmt.Errorf("the probe VM did not reach its init within %s: %s", timeout, lastLine(out.String()))
		}
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 200 {
		s = s[:200]
	}
	if s == "" {
		return "no console output"
	}
	return s
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
