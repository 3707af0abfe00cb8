//go:build linux

package microvm

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// VM is what a VMM driver needs to build one microVM's command line. Every
// host file reaches the VMM as an inherited descriptor (no host paths), so
// the VMM needs no view of the host's filesystem.
type VM struct {
	Name     string
	Accel    string // "kvm" or "tcg"
	CPUs     int
	MemoryMB int
	// KernelFD, InitrdFD, BaseFD (read-only raw image), OverlayFD
	// (read-write qcow2 whose backing is the base) and ConfigFD (read-only
	// raw config disk) are descriptor numbers in the VMM process.
	KernelFD, InitrdFD, BaseFD, OverlayFD, ConfigFD int
	// MemFD, when > 0, is the guest RAM's file (shared mapping, so a
	// checkpoint only saves device state); QMPFD, when > 0, a listening
	// unix socket for the machine protocol.
	MemFD, QMPFD int
	// Incoming starts the VM waiting for a saved state (restore).
	Incoming bool
	Cmdline  string
	TapName  string // TAP device in the VMM's network namespace
	MAC      net.HardwareAddr
}

// Driver builds the command line of a VMM. QEMU's microvm machine is the
// one implementation; a Firecracker driver would be another.
type Driver interface {
	// Name identifies the VMM ("qemu").
	Name() string
	// Args returns the VMM's arguments (without argv[0]) for vm.
	Args(vm VM) ([]string, error)
}

// QEMU drives qemu-system-x86_64 -M microvm (virtio-mmio devices, no PCI,
// no ACPI, no firmware: the kernel is loaded directly through its PVH note).
type QEMU struct{}

var _ Driver = QEMU{}

// Name implements Driver.
func (QEMU) Name() string { return "qemu" }

// Args implements Driver.
func (QEMU) Args(vm VM) ([]string, error) {
	if vm.Accel != "kvm" && vm.Accel != "tcg" {
		return nil, fmt.Errorf("qemu: unknown accelerator %q", vm.Accel)
	}
	if vm.CPUs < 1 || vm.MemoryMB < 64 {
		return nil, fmt.Errorf("qemu: need at least 1 vCPU and 64 MB (got %d, %d MB)", vm.CPUs, vm.MemoryMB)
	}
	if strings.ContainsAny(vm.TapName, ",= ") || strings.ContainsAny(vm.Name, ", ") {
		return nil, fmt.Errorf("qemu: bad name %q or tap %q", vm.Name, vm.TapName)
	}
	cpu := "max"
	if vm.Accel == "kvm" {
		cpu = "host"
	}
	fd := func(n int) string { return "/proc/self/fd/" + strconv.Itoa(n) }
	machine := "microvm,x-option-roms=off,isa-serial=on,rtc=on,acpi=off"
	if vm.MemFD > 0 {
		machine += ",memory-backend=mem"
	}
	args := []string{
		"-name", vm.Name,
		// rtc=on: without it half the boots lose 1 s reading the clock;
		// pit/pic stay on (off hangs the boot).
		"-M", machine,
		"-accel", vm.Accel,
		"-cpu", cpu,
		"-m", strconv.Itoa(vm.MemoryMB),
		"-smp", strconv.Itoa(vm.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		// QEMU's seccomp filter: no exec, no privilege changes, no
		// obsolete syscalls, no scheduler/affinity changes.
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		"-serial", "stdio",
		"-kernel", fd(vm.KernelFD),
		"-initrd", fd(vm.InitrdFD),
		"-append", vm.Cmdline,
		"-add-fd", fmt.Sprintf("fd=%d,set=1", vm.BaseFD),
		"-add-fd", fmt.Sprintf("fd=%d,set=2", vm.OverlayFD),
		"-add-fd", fmt.Sprintf("fd=%d,set=3", vm.ConfigFD),
		"-blockdev", "driver=raw,node-name=base,read-only=on,file.driver=file,file.filename=/dev/fdset/1,file.locking=off",
		"-blockdev", "driver=qcow2,node-name=root,backing=base,file.driver=file,file.filename=/dev/fdset/2,file.locking=off",
		"-device", "virtio-blk-device,drive=root",
		"-blockdev", "driver=raw,node-name=cfg,read-only=on,file.driver=file,file.filename=/dev/fdset/3,file.locking=off",
		"-device", "virtio-blk-device,drive=cfg",
		"-device", "virtio-rng-device",
	}
	if vm.MemFD > 0 {
		args = append(args, "-object", fmt.Sprintf("memory-backend-file,id=mem,size=%dM,mem-path=%s,share=on", vm.MemoryMB, fd(vm.MemFD)))
	}
	if vm.QMPFD > 0 {
		args = append(args, "-chardev", fmt.Sprintf("socket,id=qmp,fd=%d,server=on,wait=off", vm.QMPFD), "-mon", "chardev=qmp,mode=control")
	}
	if vm.Incoming {
		args = append(args, "-incoming", "defer")
	}
	if vm.TapName != "" {
		args = append(args,
			"-netdev", "tap,id=net0,ifname="+vm.TapName+",script=no,downscript=no",
			"-device", "virtio-net-device,netdev=net0,mac="+vm.MAC.String())
	}
	return args, nil
}
