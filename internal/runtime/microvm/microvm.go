//go:build linux

package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// ErrInvalidSpec marks errors caused by a bad runtime.Spec; it is
// runtime.ErrInvalidSpec too.
var ErrInvalidSpec = runtime.InvalidSpec("microvm")

// Defaults for resources a spec leaves at 0.
const (
	DefaultCPUs     = 1
	DefaultMemoryMB = 512
	DefaultDiskMB   = 1024
	// NobodyID is the default uid and gid of the VMM.
	NobodyID = 65534
)

// Config configures the microVM runtime.
type Config struct {
	// Root is the runtime's state directory (root images, initrds, one
	// record per running VM). Required.
	Root string
	// KernelPath is the guest vmlinux. Required.
	KernelPath string
	// Accel is "kvm" or "tcg" (see Probe). Required.
	Accel string
	// QEMUPath is qemu-system-x86_64 (default: from PATH).
	QEMUPath string
	// UID and GID the VMM runs as; 0 means NobodyID.
	UID, GID int
	// DiskMB is the writable space when Resources.DiskMB is 0.
	DiskMB int
	// Driver builds the VMM command line; default QEMU.
	Driver Driver
}

// Runtime is the microVM implementation of runtime.Runtime.
type Runtime struct {
	root, imagesDir, runDir string
	kernel, accel           string
	qemu, qemuImg, mkfs     string
	nsenter, sh             string
	e2fsck, setpriv         string
	uid, gid, diskMB        int
	driver                  Driver
	log                     *slog.Logger

	// mu guards exits: how VMs started by this process ended, by id.
	mu    sync.Mutex
	exits map[string]string

	vols volumeServers // volumes.go
}

var (
	_ runtime.Runtime      = (*Runtime)(nil)
	_ runtime.StopReasoner = (*Runtime)(nil)
)

// New checks cfg and the host tools and returns a Runtime.
func New(cfg Config, log *slog.Logger) (*Runtime, error) {
	if log == nil {
		log = slog.Default()
	}
	if cfg.Root == "" || cfg.KernelPath == "" {
		return nil, errors.New("microvm: Config.Root and Config.KernelPath are required")
	}
	if cfg.Accel != "kvm" && cfg.Accel != "tcg" {
		return nil, fmt.Errorf("microvm: Config.Accel must be kvm or tcg, not %q", cfg.Accel)
	}
	if fi, err := os.Stat(cfg.KernelPath); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("microvm: guest kernel %q not found (run scripts/build-kernel.sh)", cfg.KernelPath)
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("resolving microvm root: %w", err)
	}
	r := &Runtime{
		root: root, imagesDir: filepath.Join(root, "images"), runDir: filepath.Join(root, "run"),
		kernel: cfg.KernelPath, accel: cfg.Accel, uid: cfg.UID, gid: cfg.GID, diskMB: cfg.DiskMB,
		driver: cfg.Driver, log: log.With("runtime", "microvm"), exits: map[string]string{},
	}
	if r.uid == 0 {
		r.uid = NobodyID
	}
	if r.gid == 0 {
		r.gid = NobodyID
	}
	if r.diskMB <= 0 {
		r.diskMB = DefaultDiskMB
	}
	if r.driver == nil {
		r.driver = QEMU{}
	}
	tools := []struct {
		dst  *string
		name string
	}{
		{&r.qemu, firstNonEmpty(cfg.QEMUPath, "qemu-system-x86_64")},
		{&r.qemuImg, "qemu-img"}, {&r.mkfs, "mkfs.ext4"}, {&r.nsenter, "nsenter"}, {&r.sh, "sh"},
		{&r.e2fsck, "e2fsck"}, {&r.setpriv, "setpriv"},
	}
	for _, t := range tools {
		if *t.dst, err = lookPath(t.name); err != nil {
			return nil, fmt.Errorf("microvm: %s not found (install qemu-system-x86, qemu-utils, e2fsprogs, util-linux): %w", t.name, err)
		}
	}
	for _, d := range []string{r.imagesDir, r.runDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("creating %s: %w", d, err)
		}
	}
	r.reattachVolumes()
	return r, nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// lookPath finds name in PATH, then in the sbin directories.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(d, name); isExec(p) {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return "microvm" }

// Accel reports the accelerator the VMs run under.
func (r *Runtime) Accel() string { return r.accel }

// record is what the runtime keeps about a running VM on disk, so that a
// restarted daemon finds it again.
type record struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"startTime"` // /proc/<pid>/stat field 22
	Dir       string `json:"dir"`
	NetNS     string `json:"netns"`
	MemoryMB  int    `json:"memoryMB"`
	DiskMB    int    `json:"diskMB"`
}

func (r *Runtime) recordPath(id string) string { return filepath.Join(r.runDir, id+".json") }

func (r *Runtime) readRecord(id string) (record, error) {
	var rec record
	b, err := os.ReadFile(r.recordPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return rec, runtime.ErrNotFound
	}
	if err != nil {
		return rec, fmt.Errorf("reading VM record: %w", err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("parsing VM record %s: %w", id, err)
	}
	return rec, nil
}

func validate(spec runtime.Spec) error {
	if err := spec.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	res := spec.Resources
	if res.MemoryMB != 0 && res.MemoryMB < 128 {
		return fmt.Errorf("%w: a microVM needs at least 128 MB of memory", ErrInvalidSpec)
	}
	return nil
}

// Files inside a sandbox's Dir.
const (
	overlayFile = "root.qcow2"
	memoryFile  = "memory"
	vmFile      = "vm.json"
	qmpSocket   = "qmp.sock"
	configFile  = "config.img"
	consoleFile = "console.log"
	jailDir     = "jail"
)

// destroyStep is the Cleanup step that removes what a failed start or
// clone (what) of sandbox id made.
func (r *Runtime) destroyStep(what, id, dir, netns string) func(context.Context) {
	return func(ctx context.Context) {
		if err := r.destroy(ctx, id, dir, netns); err != nil {
			r.log.Error("cleaning up failed "+what, "id", id, "err", err)
		}
	}
}

// ConsolePath is the guest's serial console log (kernel and agent output).
func ConsolePath(dir string) string { return filepath.Join(dir, consoleFile) }

// Start implements runtime.Runtime: it prepares the root disk and the
// network hand-over, then starts the jailed VMM and returns once it runs
// (the agent answers later, after the guest has booted).
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) (err error) {
	if err := validate(spec); err != nil {
		return err
	}
	dir := filepath.Clean(spec.Dir)
	if _, err := os.Stat(r.recordPath(spec.ID)); err == nil {
		return fmt.Errorf("%w: sandbox %s already exists", ErrInvalidSpec, spec.ID)
	}
	if err := runtime.MakeSandboxDir(dir, ErrInvalidSpec); err != nil {
		return err
	}
	t0 := time.Now()
	var undo runtime.Cleanup
	defer undo.Unwind(ctx, &err)
	undo.Push(r.destroyStep("start", spec.ID, dir, spec.NetNSPath))
	undo.Push(func(context.Context) {
		if tail := runtime.LogTail(ConsolePath(dir), 2048); tail != "" {
			err = fmt.Errorf("%w\nconsole: %s", err, tail)
		}
	})

	initrd, err := agentInitrd(r.imagesDir, spec.AgentPath)
	if err != nil {
		return err
	}
	base, err := r.baseImage(ctx, filepath.Clean(spec.RootFS))
	if err != nil {
		return err
	}
	res := spec.Resources
	cpus, mem, disk := max(res.CPUCount, 0), res.MemoryMB, res.DiskMB
	if cpus == 0 {
		cpus = DefaultCPUs
	}
	if mem == 0 {
		mem = DefaultMemoryMB
	}
	if disk == 0 {
		disk = r.diskMB
	}
	if err := r.createOverlay(ctx, base, filepath.Join(dir, overlayFile), disk); err != nil {
		return err
	}
	hostname := firstNonEmpty(spec.Hostname, spec.ID)
	if err := writeConfigDisk(filepath.Join(dir, configFile), GuestConfig{
		Hostname: hostname, Hosts: spec.Hosts, Nameservers: spec.Nameservers, Env: spec.Env,
		TimeUnixNano: time.Now().UnixNano(), Mounts: guestMounts(vmVolumes(spec.Mounts)),
	}); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(dir, jailDir), 0o700); err != nil {
		return fmt.Errorf("creating jail dir: %w", err)
	}
	if err := createMemoryFile(filepath.Join(dir, memoryFile), mem, r.uid, r.gid); err != nil {
		return err
	}
	gn, err := r.setupTap(ctx, spec.NetNSPath, r.uid, r.gid)
	if err != nil {
		return err
	}
	vr := vmRecord{
		Kernel: r.kernel, Initrd: initrd, Base: base, CPUs: cpus, MemoryMB: mem, DiskMB: disk,
		// panic=-1: a guest kernel panic reboots at once, and -no-reboot
		// turns that into the VMM exiting: the sandbox is reported dead.
		// no_timer_check: emulated on a busy host, the IO-APIC timer
		// check at boot can miss its window and panic the kernel.
		// random.trust_cpu=on: the RNG is ready from RDRAND while only the
		// boot CPU runs, so its static key is patched before other vCPUs
		// and interrupts call into it; patched later under TCG, one call
		// site in crng_make_state faulted ("Fatal exception in interrupt"
		// during an NFS mount at 0.98 s of a cold boot).
		Cmdline: "console=ttyS0 quiet panic=-1 reboot=t no_timer_check random.trust_cpu=on " + gn.cmdline(),
		MAC:     gn.MAC.String(),
		GuestIP: gn.Addr.Addr().String(), GuestPrefix: gn.Addr.Bits(), Gateway: gn.Gateway.String(),
		Volumes: vmVolumes(spec.Mounts),
	}
	if err := writeJSON(filepath.Join(dir, vmFile), vr); err != nil {
		return err
	}
	if err := r.serveVolumes(spec.ID, dir, vr); err != nil {
		return err
	}
	prepared := time.Since(t0)
	if _, err := r.launch(spec.ID, dir, spec.NetNSPath, vr, false); err != nil {
		return err
	}
	r.log.Debug("microVM started", "id", spec.ID, "accel", r.accel, "prepare", prepared, "total", time.Since(t0))
	return nil
}

// vmRecord is how a sandbox's VM was configured (in its dir, so Restore
// starts the same machine).
type vmRecord struct {
	Kernel, Initrd, Base string
	CPUs, MemoryMB       int
	DiskMB               int
	Cmdline, MAC         string
	GuestIP              string
	// GuestPrefix and Gateway complete GuestIP (the guest's eth0).
	GuestPrefix int          `json:",omitempty"`
	Gateway     string       `json:",omitempty"`
	Pending     *pendingAddr `json:",omitempty"` // a clone not yet re-addressed
	// Volumes are the VM's volume mounts (volumes.go).
	Volumes []vmVolume `json:",omitempty"`
}

// launch starts the jailed VMM for the sandbox in dir (incoming: waiting
// for a saved state) and records it.
func (r *Runtime) launch(id, dir, nsPath string, vr vmRecord, incoming bool) (*exec.Cmd, error) {
	mac, err := net.ParseMAC(vr.MAC)
	if err != nil {
		return nil, fmt.Errorf("VM record of %s: %w", id, err)
	}
	files, err := openAll([]openSpec{
		{vr.Kernel, os.O_RDONLY}, {vr.Initrd, os.O_RDONLY}, {vr.Base, os.O_RDONLY},
		{filepath.Join(dir, overlayFile), os.O_RDWR}, {filepath.Join(dir, configFile), os.O_RDONLY},
		{filepath.Join(dir, memoryFile), os.O_RDWR},
	})
	if err != nil {
		return nil, err
	}
	defer closeAll(files)
	qmpFile, err := listenQMP(filepath.Join(dir, qmpSocket))
	if err != nil {
		return nil, err
	}
	defer qmpFile.Close()
	vm := VM{
		Name: "airlock-" + id, Accel: r.accel, CPUs: vr.CPUs, MemoryMB: vr.MemoryMB,
		KernelFD: 3, InitrdFD: 4, BaseFD: 5, OverlayFD: 6, ConfigFD: 7, MemFD: 8, QMPFD: 9,
		Incoming: incoming, Cmdline: vr.Cmdline, TapName: TapName, MAC: mac,
	}
	procs, err := createCgroups(id, cgroupLimits{MemoryMB: vr.MemoryMB, CPUs: vr.CPUs})
	if err != nil {
		return nil, err
	}
	cmd, err := r.command(dir, nsPath, vm, procs)
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = append(files, qmpFile)
	logf, err := os.OpenFile(ConsolePath(dir), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening console log: %w", err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting VMM: %w", err)
	}
	pid := cmd.Process.Pid
	st, _ := procStartTime(pid)
	rec := record{PID: pid, StartTime: st, Dir: dir, NetNS: nsPath, MemoryMB: vr.MemoryMB, DiskMB: vr.DiskMB}
	if err := writeJSON(r.recordPath(id), rec); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	go r.wait(id, dir, cmd)
	return cmd, nil
}

// listenQMP creates the VMM's control socket at path and returns its
// listening descriptor for the VMM to inherit.
func listenQMP(path string) (*os.File, error) {
	_ = os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("creating the VMM control socket: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	defer ln.Close()
	f, err := ln.File()
	if err != nil {
		return nil, fmt.Errorf("VMM control socket: %w", err)
	}
	return f, nil
}

// createMemoryFile creates the guest RAM file, owned by the VMM's user.
func createMemoryFile(path string, mb, uid, gid int) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("creating guest memory file: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(int64(mb) << 20); err != nil {
		return fmt.Errorf("sizing guest memory file: %w", err)
	}
	if err := f.Chown(uid, gid); err != nil {
		return fmt.Errorf("chown guest memory file: %w", err)
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", filepath.Base(path), err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("writing %s: %w", filepath.Base(path), err)
	}
	return nil
}

// command returns the jailed VMM command for vm (see jailScript).
func (r *Runtime) command(dir, nsPath string, vm VM, cgroupProcs []string) (*exec.Cmd, error) {
	args, err := r.driver.Args(vm)
	if err != nil {
		return nil, err
	}
	devs, err := jailDevices(vm.Accel, vm.TapName != "", r.uid, r.gid)
	if err != nil {
		return nil, err
	}
	return jailCommand(r.nsenter, r.sh, jail{Dir: filepath.Join(dir, jailDir), UID: r.uid, GID: r.gid,
		Cgroups: cgroupProcs, Devices: devs, NetNS: nsPath}, append([]string{r.qemu}, args...))
}

// wait reaps the VMM and remembers why it ended.
func (r *Runtime) wait(id, dir string, cmd *exec.Cmd) {
	err := cmd.Wait()
	if in, ok := cmd.Stdin.(*os.File); ok {
		in.Close()
	}
	reason := "its virtual machine exited"
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			reason = "its virtual machine monitor was killed (" + ws.Signal().String() + ")"
		}
	}
	if tail := runtime.LogTail(ConsolePath(dir), 8192); strings.Contains(tail, "Kernel panic") {
		reason = "its guest kernel panicked"
	}
	if oomKilled(id) {
		reason = "it exceeded its memory limit"
	}
	r.mu.Lock()
	r.exits[id] = reason
	r.mu.Unlock()
}

// StopReason implements runtime.StopReasoner.
func (r *Runtime) StopReason(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exits[id]
}

type openSpec struct {
	path string
	flag int
}

func openAll(specs []openSpec) ([]*os.File, error) {
	var files []*os.File
	for _, s := range specs {
		f, err := os.OpenFile(s.path, s.flag, 0)
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("opening %s: %w", s.path, err)
		}
		files = append(files, f)
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// procStartTime returns field 22 (starttime) of /proc/<pid>/stat and
// whether the process is a zombie.
func procStartTime(pid int) (uint64, error) {
	st, _, err := procStat(pid)
	return st, err
}

func procStat(pid int) (start uint64, fields []string, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, nil, errors.New("malformed stat")
	}
	fields = strings.Fields(s[i+1:]) // fields[0] is field 3 (state)
	if len(fields) < 20 {
		return 0, nil, errors.New("short stat")
	}
	start, err = strconv.ParseUint(fields[19], 10, 64)
	return start, fields, err
}

// alive reports whether rec's VMM process still runs.
func alive(rec record) bool {
	st, fields, err := procStat(rec.PID)
	return err == nil && st == rec.StartTime && fields[0] != "Z" && fields[0] != "X"
}

// State implements runtime.Runtime.
func (r *Runtime) State(_ context.Context, id string) (runtime.State, error) {
	if err := runtime.CheckID(ErrInvalidSpec, id); err != nil {
		return "", err
	}
	rec, err := r.readRecord(id)
	if err != nil {
		return "", err
	}
	if alive(rec) {
		return runtime.StateRunning, nil
	}
	return runtime.StateStopped, nil
}

// Caps implements runtime.Runtime: a microVM checkpoints, clones, saves
// layers, keeps the agent's (console) log, reboots from the disk and says
// why a VM stopped; its images do not depend on a runtime build.
func (r *Runtime) Caps() runtime.Caps {
	// EgressSteering: the guest's frames reach the host through tap0 →
	// (tc mirred) → eth0 → the host veth, so the host's prerouting and
	// conntrack see them as they see gVisor's (doc.go, "Network").
	return runtime.Caps{Checkpointer: r, Cloner: r, LayerSaver: r, AgentLogger: r, Rebooter: r, StopReasoner: r, Stopper: r,
		EgressSteering: true}
}

// List implements runtime.Runtime.
func (r *Runtime) List(context.Context) ([]string, error) {
	ents, err := os.ReadDir(r.runDir)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", r.runDir, err)
	}
	var ids []string
	for _, e := range ents {
		if id, ok := strings.CutSuffix(e.Name(), ".json"); ok && runtime.ValidID(id) == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Destroy implements runtime.Runtime: kills the VMM, removes the TAP and
// deletes dir (overlay, config disk, console log). Unknown ids are fine.
func (r *Runtime) Destroy(ctx context.Context, id, dir string) error {
	if err := runtime.CheckID(ErrInvalidSpec, id); err != nil {
		return err
	}
	rec, err := r.readRecord(id)
	if err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return err
	}
	if dir == "" {
		dir = rec.Dir
	}
	return r.destroy(ctx, id, dir, rec.NetNS)
}

func (r *Runtime) destroy(ctx context.Context, id, dir, nsPath string) error {
	defer r.stopVolumes(id)
	if rec, err := r.readRecord(id); err == nil {
		if alive(rec) {
			_ = syscall.Kill(rec.PID, syscall.SIGKILL)
		}
		for deadline := time.Now().Add(10 * time.Second); alive(rec) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		if alive(rec) {
			return fmt.Errorf("microvm: VMM %d of %s did not exit", rec.PID, id)
		}
	}
	if nsPath != "" {
		r.removeTap(ctx, nsPath)
	}
	var errs []error
	if err := removeCgroups(id); err != nil {
		errs = append(errs, fmt.Errorf("removing cgroups: %w", err))
	}
	if dir != "" {
		dir = filepath.Clean(dir)
		if !filepath.IsAbs(dir) || dir == "/" {
			return fmt.Errorf("%w: Dir %q must be an absolute path", ErrInvalidSpec, dir)
		}
		if err := unmountUnder(dir); err != nil {
			errs = append(errs, err)
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("removing sandbox dir: %w", err))
		}
	}
	if err := os.Remove(r.recordPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroying sandbox %s: %w", id, err)
	}
	r.mu.Lock()
	delete(r.exits, id)
	r.mu.Unlock()
	return nil
}

// AgentLog implements runtime.AgentLogger: the serial console carries the
// agent's stderr (among the guest kernel's lines).
func (r *Runtime) AgentLog(dir string) string { return ConsolePath(dir) }
