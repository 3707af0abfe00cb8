//go:build linux

// Package vminit turns airlock-envd into the init of an Airlock microVM
// (internal/runtime/microvm). The agent starts as /init of an initramfs
// that holds it and a marker file; Boot mounts the sandbox's root disk,
// applies the guest configuration from the config disk (hostname, hosts,
// resolv.conf, environment, clock), makes the agent binary visible at its
// usual path, switches root and mounts the kernel file systems. The
// gVisor path never gets here: it has no marker file.
package vminit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/guest"
)

// Marker, in the initramfs root, says "you are PID 1 of a microVM".
const Marker = "/airlock-vm"

// configMagic starts the config disk (microvm.ConfigMagic).
const configMagic = "AIRLOCK-VM-CONFIG\n"

// ProbeOK is printed on the console when the kernel command line asks for
// a boot probe (airlock.probe): the VM then powers off at once.
const ProbeOK = "AIRLOCK-PROBE-OK"

// agentPath is where the agent appears inside the sandbox
// (runtime.AgentGuestPath; not imported to keep the agent small).
const agentPath = "/usr/local/bin/airlock-envd"

// Config mirrors microvm.GuestConfig.
type Config struct {
	Hostname     string   `json:"hostname"`
	Hosts        []string `json:"hosts"`
	Nameservers  []string `json:"nameservers"`
	Env          []string `json:"env"`
	TimeUnixNano int64    `json:"timeUnixNano"`
	Mounts       []Mount  `json:"mounts"`
}

// InVM reports whether this process is PID 1 of an Airlock microVM that has
// not switched to its root disk yet.
func InVM() bool {
	if os.Getpid() != 1 {
		return false
	}
	_, err := os.Stat(Marker)
	return err == nil
}

// bootedMarker (on the guest's /run tmpfs) tells the re-executed agent that
// it is the init of a microVM that has booted.
const bootedMarker = "/run/airlock-vm-booted"

// Booted reports whether this process is PID 1 of a booted microVM (after
// Boot's re-exec): it must power the VM off instead of exiting.
func Booted() bool {
	if os.Getpid() != 1 {
		return false
	}
	_, err := os.Stat(bootedMarker)
	return err == nil
}

// Boot prepares the guest, switches to the root disk and re-executes the
// agent from its usual path with the sandbox's environment (so the agent's
// /proc/1/cmdline and environ look as under gVisor). It returns only on
// error.
func Boot() error {
	if err := boot(); err != nil {
		return err
	}
	if err := os.WriteFile(bootedMarker, nil, 0o444); err != nil {
		return fmt.Errorf("writing %s: %w", bootedMarker, err)
	}
	args := append([]string{agentPath}, os.Args[1:]...)
	if err := unix.Exec(agentPath, args, os.Environ()); err != nil {
		return fmt.Errorf("re-executing the agent: %w", err)
	}
	return nil
}

func boot() error {
	if err := mount("devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"); err != nil {
		return err
	}
	if err := mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	if cmdline, _ := os.ReadFile("/proc/cmdline"); bytes.Contains(cmdline, []byte("airlock.probe")) {
		fmt.Println(ProbeOK)
		PowerOff()
	}
	cfg, rootDev, err := findDisks()
	if err != nil {
		return err
	}
	if err := mount(rootDev, "/newroot", "ext4", 0, ""); err != nil {
		return err
	}
	if err := growFS(rootDev, "/newroot"); err != nil {
		fmt.Fprintln(os.Stderr, "airlock-envd: growing the root file system:", err)
	}
	if err := writeGuestFiles("/newroot", cfg); err != nil {
		return err
	}
	// The agent binary lives only in the initramfs; bind it to its usual
	// path so a rebuilt agent never needs a rebuilt root image.
	target := "/newroot" + agentPath
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(agentPath), err)
	}
	if _, err := os.Lstat(target); err != nil {
		if err := os.WriteFile(target, nil, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", agentPath, err)
		}
	}
	if err := unix.Mount("/init", target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding the agent to %s: %w", agentPath, err)
	}
	_ = unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, "")
	for _, d := range []string{"/dev", "/proc"} {
		_ = os.MkdirAll("/newroot"+d, 0o755)
		if err := unix.Mount(d, "/newroot"+d, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("moving %s: %w", d, err)
		}
	}
	if err := switchRoot("/newroot"); err != nil {
		return err
	}
	if err := mountKernelFS(); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	setClock(cfg.TimeUnixNano)
	if err := loopbackUp(); err != nil {
		return err
	}
	if err := mountVolumes(cfg.Mounts); err != nil {
		return err
	}
	applyEnv(cfg.Env)
	return nil
}

func mount(src, dst, fstype string, flags uintptr, data string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dst, err)
	}
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		return fmt.Errorf("mounting %s on %s: %w", src, dst, err)
	}
	return nil
}

// findDisks reads the config disk (the virtio disk that starts with
// configMagic) and returns it with the other disk, the root.
func findDisks() (Config, string, error) {
	var cfg Config
	var root string
	found := false
	for _, name := range []string{"vda", "vdb", "vdc"} {
		dev := "/dev/" + name
		f, err := os.Open(dev)
		if err != nil {
			continue
		}
		buf := make([]byte, 64<<10)
		n, _ := f.Read(buf)
		f.Close()
		b, ok := bytes.CutPrefix(buf[:n], []byte(configMagic))
		if !ok {
			if root == "" {
				root = dev
			}
			continue
		}
		if i := bytes.IndexByte(b, 0); i >= 0 {
			b = b[:i]
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			return cfg, "", fmt.Errorf("parsing the config disk %s: %w", dev, err)
		}
		found = true
	}
	if !found || root == "" {
		return cfg, "", errors.New("no config disk or no root disk (want two virtio disks)")
	}
	if cfg.Hostname == "" {
		cfg.Hostname = "sandbox"
	}
	return cfg, root, nil
}

// growFS grows the mounted ext4 file system at mnt to the size of dev
// (the sandbox's overlay is larger than the shared base image).
func growFS(dev, mnt string) error {
	f, err := os.Open(dev)
	if err != nil {
		return err
	}
	var size uint64
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size)))
	f.Close()
	if errno != 0 {
		return fmt.Errorf("BLKGETSIZE64: %w", errno)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		return err
	}
	blocks := size / uint64(st.Bsize)
	if blocks <= st.Blocks {
		return nil
	}
	d, err := os.Open(mnt)
	if err != nil {
		return err
	}
	defer d.Close()
	const ext4IOCResizeFS = 0x40086610 // _IOW('f', 16, __u64)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, d.Fd(), ext4IOCResizeFS, uintptr(unsafe.Pointer(&blocks))); errno != 0 {
		return fmt.Errorf("EXT4_IOC_RESIZE_FS: %w", errno)
	}
	return nil
}

// writeGuestFiles writes hostname, hosts and resolv.conf, replacing what
// the template has there (symlinks included).
func writeGuestFiles(root string, cfg Config) error {
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	fmt.Fprintf(&hosts, "127.0.1.1\t%s\n", cfg.Hostname)
	for _, h := range cfg.Hosts {
		hosts.WriteString(strings.TrimSpace(h) + "\n")
	}
	var resolv strings.Builder
	for _, ns := range cfg.Nameservers {
		fmt.Fprintf(&resolv, "nameserver %s\n", ns)
	}
	for name, data := range map[string]string{
		"etc/hostname": cfg.Hostname + "\n", "etc/hosts": hosts.String(), "etc/resolv.conf": resolv.String(),
	} {
		p := filepath.Join(root, name)
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		_ = os.Remove(p)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			return fmt.Errorf("writing /%s: %w", name, err)
		}
	}
	return nil
}

// switchRoot makes dir the root: move it onto /, chroot into it. The
// initramfs stays underneath (it holds the agent binary).
func switchRoot(dir string) error {
	if err := unix.Chdir(dir); err != nil {
		return fmt.Errorf("chdir %s: %w", dir, err)
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("moving %s to /: %w", dir, err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	return unix.Chdir("/")
}

// mountKernelFS mounts what a Linux userland expects besides /dev and /proc.
func mountKernelFS() error {
	ms := []struct {
		src, dst, fstype string
		flags            uintptr
		data             string
	}{
		{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "ptmxmode=0666,mode=0620,gid=5"},
		{"shm", "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755"},
	}
	for _, m := range ms {
		if err := mount(m.src, m.dst, m.fstype, m.flags, m.data); err != nil {
			return err
		}
	}
	_ = os.Remove("/dev/ptmx")
	_ = os.Symlink("pts/ptmx", "/dev/ptmx")
	for _, l := range [][2]string{{"/proc/self/fd", "/dev/fd"}, {"/proc/self/fd/0", "/dev/stdin"}, {"/proc/self/fd/1", "/dev/stdout"}, {"/proc/self/fd/2", "/dev/stderr"}} {
		_ = os.Symlink(l[0], l[1])
	}
	if fi, err := os.Stat("/tmp"); err != nil || !fi.IsDir() {
		_ = os.MkdirAll("/tmp", 0o777)
	}
	return os.Chmod("/tmp", os.ModeSticky|0o777)
}

// setClock sets the clock to the host's time at VM start when the guest's
// is more than a second off (the RTC has only whole seconds).
func setClock(hostNano int64) {
	if hostNano == 0 {
		return
	}
	if d := time.Since(time.Unix(0, hostNano)); d > -time.Second && d < 5*time.Second {
		return
	}
	tv := unix.NsecToTimeval(hostNano)
	_ = unix.Settimeofday(&tv)
}

// ClockHeader carries the host's time on the daemon's POST /freeze after a
// microVM was restored: the guest's clock stood still while it was saved.
const ClockHeader = guest.HeaderHostTime

// SyncClock sets the clock to the RFC 3339 time v when it is more than
// 50 ms off. It reports the skew it corrected.
func SyncClock(v string) (time.Duration, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, fmt.Errorf("bad %s: %w", ClockHeader, err)
	}
	d := time.Since(t)
	if d > -50*time.Millisecond && d < 50*time.Millisecond {
		return 0, nil
	}
	tv := unix.NsecToTimeval(t.UnixNano())
	if err := unix.Settimeofday(&tv); err != nil {
		return 0, fmt.Errorf("settimeofday: %w", err)
	}
	return -d, nil
}

// loopbackUp brings lo up (eth0 is configured by the kernel's ip=).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("reading lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	return nil
}

// defaultPath is the PATH when the spec's environment has none.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// applyEnv replaces the kernel-given environment with the sandbox's.
func applyEnv(env []string) {
	os.Clearenv()
	hasPath := false
	for _, kv := range env {
		hasPath = hasPath || strings.HasPrefix(kv, "PATH=")
	}
	if !hasPath {
		env = append([]string{defaultPath}, env...)
	}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			_ = os.Setenv(k, v)
		}
	}
}

// PowerOff flushes the disks and ends the VM (the VMM runs with
// -no-reboot, so a reboot makes it exit).
func PowerOff() {
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	for {
		time.Sleep(time.Hour)
	}
}
