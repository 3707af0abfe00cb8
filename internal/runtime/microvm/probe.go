//go:build linux

package microvm

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// probeOK is what the agent prints when booted with airlock.probe
// (vminit.ProbeOK).
const probeOK = "AIRLOCK-PROBE-OK"

// ProbeConfig is what Probe needs.
type ProbeConfig struct {
	QEMU, Kernel, Agent string
	CacheDir            string // where the agent's initramfs is built
	Accel               string // "kvm" or "tcg"
	Timeout             time.Duration
	UID, GID            int // the VMM's user; 0 means NobodyID
}

// Probe boots a throw-away VM exactly as a sandbox's VMM runs - jailed,
// unprivileged, with the jail's own device nodes and a TAP (in a fresh,
// empty network namespace), but no disks - and returns nil once its init,
// the agent, reports on the console, or an error saying why not within
// the timeout. Under a software "KVM" such as PVM the guest kernel dies in
// KVM's instruction emulator, and under no virtualisation at all /dev/kvm
// is missing: both are errors for "kvm". Anything else a VM needs from the
// host (device access as the VMM's user, the TAP, a static agent) fails
// here too, before the daemon hands out a single microVM.
func Probe(ctx context.Context, c ProbeConfig) error {
	if c.Accel == "kvm" {
		if _, err := os.Stat("/dev/kvm"); err != nil {
			return errors.New("no /dev/kvm")
		}
	}
	if c.UID == 0 {
		c.UID = NobodyID
	}
	if c.GID == 0 {
		c.GID = NobodyID
	}
	tools := map[string]string{"sh": "", "ip": "", "setpriv": "", "nsenter": ""}
	for name := range tools {
		p, err := lookPath(name)
		if err != nil {
			return fmt.Errorf("%s not found (install iproute2 and util-linux)", name)
		}
		tools[name] = p
	}
	initrd, err := agentInitrd(c.CacheDir, c.Agent)
	if err != nil {
		return err
	}
	files, err := openAll([]openSpec{{c.Kernel, os.O_RDONLY}, {initrd, os.O_RDONLY}})
	if err != nil {
		return err
	}
	defer closeAll(files)
	jailRoot, err := os.MkdirTemp(c.CacheDir, "probe-jail-")
	if err != nil {
		return fmt.Errorf("creating the probe's jail dir: %w", err)
	}
	defer os.RemoveAll(jailRoot)
	devs, err := jailDevices(c.Accel, true, c.UID, c.GID)
	if err != nil {
		return err
	}
	cpu := "max"
	if c.Accel == "kvm" {
		cpu = "host"
	}
	cmd, err := jailCommand(tools["nsenter"], tools["sh"], jail{
		Dir: jailRoot, UID: c.UID, GID: c.GID, Devices: devs, NewNet: true,
		Pre: tools["ip"] + ` tuntap add dev ` + TapName + ` mode tap user "$uid" group "$gid" && ` + tools["ip"] + ` link set ` + TapName + ` up`,
	}, []string{c.QEMU,
		"-M", "microvm,x-option-roms=off,isa-serial=on,rtc=on,acpi=off",
		"-accel", c.Accel, "-cpu", cpu, "-m", "128", "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		"-serial", "stdio", "-kernel", "/proc/self/fd/3", "-initrd", "/proc/self/fd/4",
		"-netdev", "tap,id=net0,ifname=" + TapName + ",script=no,downscript=no",
		"-device", "virtio-net-device,netdev=net0",
		"-append", "console=ttyS0 quiet panic=-1 no_timer_check airlock.probe"})
	if err != nil {
		return err
	}
	if in, ok := cmd.Stdin.(*os.File); ok {
		defer in.Close()
	}
	cmd.ExtraFiles = files
	cmd.SysProcAttr.Setsid = false
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", filepath.Base(c.QEMU), err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// The jail's shell is PID 1 of its pid namespace until it execs the
	// VMM: killing it ends everything inside.
	stop := func() {
		_ = cmd.Process.Kill()
		<-done
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	timeout := time.NewTimer(c.Timeout)
	defer timeout.Stop()
	for {
		select {
		case err := <-done:
			if strings.Contains(out.String(), probeOK) {
				return nil
			}
			return fmt.Errorf("the probe VM ended (%v) after %s without reaching its init: %s", err, time.Since(t0).Round(time.Millisecond), lastLine(out.String()))
		case <-tick.C:
			if strings.Contains(out.String(), probeOK) {
				stop()
				return nil
			}
		case <-timeout.C:
			stop()
			if strings.Contains(out.String(), probeOK) {
				return nil
			}
			return fmt.Errorf("the probe VM did not reach its init within %s: %s", c.Timeout, lastLine(out.String()))
		case <-ctx.Done():
			stop()
			return ctx.Err()
		}
	}
}

// CheckAgent checks that the agent binary at path can be a microVM's init:
// a static executable. A dynamically linked one (`go build` with cgo on,
// the default) finds no loader in the initramfs, and the VM would hang
// until the agent timeout.
func CheckAgent(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("the agent binary %s is not an ELF executable: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		interp, _ := io.ReadAll(io.LimitReader(p.Open(), 256))
		return fmt.Errorf("the agent binary %s is dynamically linked (ELF interpreter %s), but a microVM runs it as PID 1 "+
			"without a loader; build it static: CGO_ENABLED=0 go build -o bin/airlock-envd ./cmd/airlock-envd (scripts/setup.sh does)",
			path, strings.TrimRight(string(interp), "\x00"))
	}
	return nil
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
