//go:build linux

package microvm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

var _ runtime.Rebooter = (*Runtime)(nil)

// Shutdown implements runtime.Rebooter: the VMM quits through its machine
// protocol (QEMU flushes the qcow2 overlay's metadata; the caller has had
// the guest sync its file systems), else it is killed after 10 s. The
// overlay, config disk and VM record stay in dir for Boot; the guest RAM
// file is emptied.
func (r *Runtime) Shutdown(ctx context.Context, id, dir string) error {
	if err := runtime.CheckID(ErrInvalidSpec, id); err != nil {
		return err
	}
	rec, err := r.readRecord(id)
	if err != nil {
		return err
	}
	if alive(rec) {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if q, err := dialQMP(qctx, filepath.Join(dir, qmpSocket)); err == nil {
			_, _ = q.cmd("quit", nil)
			q.close()
		}
		cancel()
		if !waitExit(rec, 10*time.Second) {
			_ = syscall.Kill(rec.PID, syscall.SIGKILL)
			if !waitExit(rec, 10*time.Second) {
				return fmt.Errorf("microvm: VMM %d of %s did not exit", rec.PID, id)
			}
		}
	}
	r.stopVolumes(id)
	var errs []error
	if err := removeCgroups(id); err != nil {
		errs = append(errs, fmt.Errorf("removing cgroups: %w", err))
	}
	// The next boot starts from zeroed RAM; the file keeps no old pages.
	if err := os.Truncate(filepath.Join(dir, memoryFile), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("emptying guest memory file: %w", err))
	}
	if err := os.Remove(r.recordPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Boot implements runtime.Rebooter: a cold boot of the same machine on the
// disk Shutdown kept, with the guest's current address on the kernel
// command line (a fork child's, not its parent's) and the host's clock in
// the config disk.
func (r *Runtime) Boot(ctx context.Context, spec runtime.Spec) error {
	if err := runtime.CheckID(ErrInvalidSpec, spec.ID); err != nil {
		return err
	}
	dir := filepath.Clean(spec.Dir)
	vr, err := r.stoppedVM(spec.ID, dir)
	if err != nil {
		return err
	}
	addr, err := netip.ParseAddr(vr.GuestIP)
	if err != nil {
		return fmt.Errorf("VM record of %s: guest address: %w", spec.ID, err)
	}
	gw, err := netip.ParseAddr(vr.Gateway)
	if err != nil {
		return fmt.Errorf("VM record of %s: gateway: %w", spec.ID, err)
	}
	vr.Cmdline = withIP(vr.Cmdline, guestNet{Addr: netip.PrefixFrom(addr, vr.GuestPrefix), Gateway: gw}.cmdline())
	vr.Pending = nil
	if err := refreshVolumes(&vr, spec.Mounts); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, vmFile), vr); err != nil {
		return err
	}
	cfgPath := filepath.Join(dir, configFile)
	cfg, err := readConfigDisk(cfgPath)
	if err != nil {
		return err
	}
	cfg.TimeUnixNano = time.Now().UnixNano()
	if err := os.Remove(cfgPath); err != nil {
		return fmt.Errorf("replacing config disk: %w", err)
	}
	if err := writeConfigDisk(cfgPath, cfg); err != nil {
		return err
	}
	mem := filepath.Join(dir, memoryFile)
	if err := os.Truncate(mem, int64(vr.MemoryMB)<<20); err != nil {
		return fmt.Errorf("sizing guest memory file: %w", err)
	}
	if err := r.handBackAddress(ctx, spec.NetNSPath); err != nil {
		return err
	}
	if err := r.serveVolumes(spec.ID, dir, vr); err != nil {
		return err
	}
	if _, err := r.launch(spec.ID, dir, spec.NetNSPath, vr, false); err != nil {
		r.stopVolumes(spec.ID)
		return err
	}
	r.log.Debug("microVM booted again from its disk", "id", spec.ID)
	return nil
}

// withIP replaces the ip= argument of a kernel command line.
func withIP(cmdline, ip string) string {
	f := strings.Fields(cmdline)
	out := f[:0]
	for _, a := range f {
		if !strings.HasPrefix(a, "ip=") {
			out = append(out, a)
		}
	}
	return strings.Join(append(out, ip), " ")
}

// readConfigDisk parses a disk written by writeConfigDisk.
func readConfigDisk(path string) (GuestConfig, error) {
	var cfg GuestConfig
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("reading config disk: %w", err)
	}
	rest, ok := bytes.CutPrefix(b, []byte(ConfigMagic))
	if !ok {
		return cfg, fmt.Errorf("config disk %s has no %q header", path, ConfigMagic)
	}
	if err := json.NewDecoder(bytes.NewReader(bytes.TrimRight(rest, "\x00"))).Decode(&cfg); err != nil {
		return cfg, fmt.Errorf("parsing config disk: %w", err)
	}
	return cfg, nil
}

// stoppedVM reads the VM record in dir of sandbox id, whose VMM must not be
// running (Restore and Boot start it again).
func (r *Runtime) stoppedVM(id, dir string) (vmRecord, error) {
	var vr vmRecord
	b, err := os.ReadFile(filepath.Join(dir, vmFile))
	if err != nil {
		return vr, fmt.Errorf("reading VM record of %s: %w", id, err)
	}
	if err := json.Unmarshal(b, &vr); err != nil {
		return vr, fmt.Errorf("parsing VM record of %s: %w", id, err)
	}
	if rec, err := r.readRecord(id); err == nil && alive(rec) {
		return vr, fmt.Errorf("%w: sandbox %s is running", ErrInvalidSpec, id)
	}
	return vr, nil
}

// handBackAddress takes the guest's address off eth0 in the sandbox's netns
// (the daemon's network.Readdress puts it back for gVisor's sake; in a VM
// the guest owns it) and checks that the VMM's TAP is still there.
func (r *Runtime) handBackAddress(ctx context.Context, nsPath string) error {
	if _, err := r.inNetNS(ctx, nsPath, "ip", "addr", "flush", "dev", "eth0"); err != nil {
		return err
	}
	if _, err := r.inNetNS(ctx, nsPath, "ip", "link", "show", TapName); err != nil {
		return fmt.Errorf("the sandbox's TAP is gone: %w", err)
	}
	return nil
}
