//go:build linux

package microvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
)

// fixture is built once by TestMain for the root tests.
var fixture struct {
	dir, kernel, release, agent, rootfs string
}

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "microvm boot tests need root (netns, TAP, namespaces); running unit tests only")
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "altest-microvm-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := buildFixture(dir); err != nil {
		fmt.Fprintln(os.Stderr, "building fixture:", err)
		return 1
	}
	return m.Run()
}

func buildFixture(dir string) error {
	fixture.dir = dir
	// The kernel build is cached per machine; the first call takes minutes.
	out, err := exec.Command("bash", "../../../scripts/build-kernel.sh").Output()
	if err != nil {
		return fmt.Errorf("scripts/build-kernel.sh: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	fixture.kernel = lines[len(lines)-1]
	rel, err := os.ReadFile(filepath.Join(filepath.Dir(fixture.kernel), "release"))
	if err != nil {
		return err
	}
	fixture.release = strings.TrimSpace(string(rel))
	fixture.agent = filepath.Join(dir, "airlock-envd")
	cmd := exec.Command("go", "build", "-o", fixture.agent, "../../../cmd/airlock-envd")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building airlock-envd: %w: %s", err, out)
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("busybox not installed (apt-get install busybox-static): %w", err)
	}
	fixture.rootfs = filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "tmp", "root", "usr/local/bin"} {
		if err := os.MkdirAll(filepath.Join(fixture.rootfs, d), 0o755); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(fixture.rootfs, "bin/busybox"), data, 0o755); err != nil {
		return err
	}
	for _, a := range []string{"sh", "bash", "uname", "cat", "ls", "echo", "sleep", "test", "hostname", "id", "tr", "grep", "wc", "df", "tail"} {
		if err := os.Symlink("busybox", filepath.Join(fixture.rootfs, "bin", a)); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(fixture.rootfs, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644)
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, TAP devices and the VMM jail (run as root on a host with qemu-system-x86)")
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// sandboxNet sets up one sandbox network with the real network manager,
// under the test prefix and subnet (AIRLOCK_TEST_NET_PREFIX/SUBNET).
// bootVM starts a microVM for spec (the test sets ID and what it checks;
// Dir, NetNSPath, RootFS and AgentPath are filled in), waits for its agent
// and destroys it at cleanup. It returns the runtime, the sandbox's network
// and the spec it started.
func bootVM(t *testing.T, ctx context.Context, spec runtime.Spec) (*Runtime, *network.Endpoint, runtime.Spec) {
	t.Helper()
	ep := sandboxNet(t, ctx, spec.ID)
	r := newRuntime(t)
	spec.Dir = filepath.Join(t.TempDir(), "sb", spec.ID)
	spec.NetNSPath, spec.RootFS, spec.AgentPath = ep.NetNSPath, fixture.rootfs, fixture.agent
	if err := r.Start(ctx, spec); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = r.Destroy(context.Background(), spec.ID, spec.Dir) })
	if err := waitAgent(ctx, r, spec.ID, ep.GuestIP); err != nil {
		t.Fatalf("%v\nconsole:\n%s", err, runtime.LogTail(ConsolePath(spec.Dir), 4096))
	}
	return r, ep, spec
}

func sandboxNet(t *testing.T, ctx context.Context, id string) *network.Endpoint {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	subnet := netip.MustParsePrefix(envOr("AIRLOCK_TEST_SUBNET", "10.98.0.0/24"))
	nm, err := network.NewManager(ctx, network.Config{Subnet: subnet, NamePrefix: envOr("AIRLOCK_TEST_NET_PREFIX", "almvt")}, log)
	if err != nil {
		t.Fatalf("network manager: %v", err)
	}
	ep, err := nm.Setup(ctx, id, 1, network.Options{})
	if err != nil {
		t.Fatalf("network setup: %v", err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := nm.Teardown(cctx, id, 1); err != nil {
			t.Errorf("teardown: %v", err)
		}
		if err := nm.Close(cctx, true); err != nil {
			t.Errorf("closing network manager: %v", err)
		}
	})
	return ep
}

func newRuntime(t *testing.T) *Runtime {
	t.Helper()
	r, err := New(Config{Root: filepath.Join(t.TempDir(), "microvm"), KernelPath: fixture.kernel, Accel: "tcg"},
		slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

// waitAgent polls the agent's /health until it answers 2xx.
func waitAgent(ctx context.Context, r *Runtime, id string, ip netip.Addr) error {
	url := guest.URL(ip.String(), guest.EnvdPort, guest.PathHealth)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
			if res.StatusCode < 300 {
				return nil
			}
		}
		if st, err := r.State(ctx, id); err != nil || st != runtime.StateRunning {
			return fmt.Errorf("sandbox %s is %v (%v) before its agent answered", id, st, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent at %s not ready: %w", ip, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// guestRun runs sh -c cmd through the agent's process service.
func guestRun(t *testing.T, ctx context.Context, ip netip.Addr, cmd string) (string, int32) {
	t.Helper()
	c := (&guest.Client{}).Process(ip.String(), "", "root")
	req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", cmd}}})
	stream, err := c.Start(ctx, req)
	if err != nil {
		t.Fatalf("starting %q: %v", cmd, err)
	}
	var out bytes.Buffer
	end, err := guest.Receive(stream, guest.Events{
		Data: func(stdout, stderr, _ []byte) error {
			out.Write(stdout)
			out.Write(stderr)
			return nil
		},
		UntilClose: true,
	})
	if err != nil && !errors.Is(err, guest.ErrNoEnd) {
		t.Fatalf("running %q: %v", cmd, err)
	}
	code := int32(-1)
	if end != nil {
		code = end.GetExitCode()
	}
	return strings.TrimSpace(out.String()), code
}

// TestBootGuestKernelJailAndCrash boots the agent in a microVM (emulated),
// checks it runs the guest kernel with virtio devices, that the VMM is
// jailed, and that killing the VMM shows as the sandbox stopping.
func TestBootGuestKernelJailAndCrash(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const id = "mvmtest1"
	r, ep, spec := bootVM(t, ctx, runtime.Spec{ID: id, Hostname: "vmhost", Nameservers: []string{"10.0.0.53"}, Env: []string{"AIRLOCK_TEST_VAR=hello"},
		Resources: runtime.Resources{CPUCount: 1, MemoryMB: 256, DiskMB: 64}})
	dir := spec.Dir

	checks := []struct{ cmd, want string }{
		{"uname -r", fixture.release},
		{"test -d /sys/bus/virtio/devices && ls /sys/bus/virtio/devices | wc -l", ""},
		{"hostname", "vmhost"},
		{"cat /etc/resolv.conf", "nameserver 10.0.0.53"},
		// spec.Env is the agent's (PID 1's) environment, as with gVisor.
		{"tr '\\0' '\\n' < /proc/1/environ | grep AIRLOCK_TEST_VAR", "AIRLOCK_TEST_VAR=hello"},
		{"tr '\\0' '\\n' < /proc/1/cmdline", "/usr/local/bin/airlock-envd"},
		{"test -f /run/airlock-vm-booted && grep -c ' / ext4 ' /proc/mounts", "1"},
		{"echo hi > /tmp/f && cat /tmp/f", "hi"},
	}
	for _, c := range checks {
		out, code := guestRun(t, ctx, ep.GuestIP, c.cmd)
		if code != 0 || (c.want != "" && out != c.want) {
			t.Errorf("%q = %q (exit %d), want %q (exit 0)", c.cmd, out, code, c.want)
		}
		if strings.HasPrefix(c.cmd, "test -d /sys/bus/virtio") && out == "0" {
			t.Errorf("no virtio devices in the guest")
		}
	}
	if host, _ := os.ReadFile("/proc/sys/kernel/osrelease"); strings.TrimSpace(string(host)) == fixture.release {
		t.Fatalf("host and guest kernel have the same release %q: cannot tell them apart", fixture.release)
	}

	if st, err := r.State(ctx, id); err != nil || st != runtime.StateRunning {
		t.Fatalf("State = %v, %v; want running", st, err)
	}
	if s, err := r.Stats(ctx, id, dir); err != nil || s.MemoryUsed == 0 || s.MemoryLimit != 256<<20 {
		t.Errorf("Stats = %+v, %v", s, err)
	}
	rec, err := r.readRecord(id)
	if err != nil {
		t.Fatal(err)
	}
	checkJail(t, rec.PID, dir)
	if lim, err := os.ReadFile(filepath.Join(cgroupDir("memory", id), "memory.limit_in_bytes")); err != nil ||
		strings.TrimSpace(string(lim)) != strconv.Itoa((256+vmmMemoryOverheadMB)<<20) {
		t.Errorf("VMM memory cgroup limit = %q, %v", lim, err)
	}
	if procs, _ := os.ReadFile(filepath.Join(cgroupDir("memory", id), "cgroup.procs")); !strings.Contains(string(procs), strconv.Itoa(rec.PID)) {
		t.Errorf("VMM %d not in its memory cgroup (procs %q)", rec.PID, procs)
	}
	// The root file system was grown into the overlay (DiskMB = 64 more).
	if out, code := guestRun(t, ctx, ep.GuestIP, "df -m / | tail -1"); code != 0 {
		t.Errorf("df: %s", out)
	} else if f := strings.Fields(out); len(f) < 2 || atoi(f[1]) < 64+100 {
		t.Errorf("root file system not grown: %q", out)
	}

	// A VMM crash is the sandbox dying.
	if err := syscall.Kill(rec.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 VMM: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := r.State(ctx, id)
		if err == nil && st == runtime.StateStopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("State after kill -9 of the VMM = %v, %v; want stopped", st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := 0; i < 100 && r.StopReason(id) == ""; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if reason := r.StopReason(id); !strings.Contains(reason, "killed") {
		t.Errorf("StopReason = %q, want it to say the VMM was killed", reason)
	}
	if err := r.Destroy(ctx, id, dir); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("sandbox dir still there after Destroy: %v", err)
	}
	if ids, _ := r.List(ctx); len(ids) != 0 {
		t.Errorf("List after Destroy = %v", ids)
	}
	if _, err := r.State(ctx, id); err != runtime.ErrNotFound {
		t.Errorf("State after Destroy = %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(cgroupDir("memory", id)); !os.IsNotExist(err) {
		t.Errorf("memory cgroup left after Destroy: %v", err)
	}
}

// checkJail verifies that the VMM with pid sees only its jail, runs as the
// unprivileged user without capabilities, and cannot open host files.
func checkJail(t *testing.T, pid int, dir string) {
	t.Helper()
	root := fmt.Sprintf("/proc/%d/root", pid)
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatalf("reading the VMM's root: %v", err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	allowed := map[string]bool{"usr": true, "dev": true, "proc": true, "etc": true, "tmp": true, "lib": true, "lib64": true, "bin": true, "sbin": true}
	for _, n := range names {
		if !allowed[n] {
			t.Errorf("VMM's root has %q (all: %v)", n, names)
		}
	}
	// Host files outside the jail do not exist for it: not the sandbox's own
	// images, not the host's secrets, not other sandboxes' data.
	for _, p := range []string{dir, filepath.Join(dir, overlayFile), "/etc/shadow", "/etc/passwd", "/var/lib", "/root", "/home"} {
		if _, err := os.Stat(root + p); !os.IsNotExist(err) {
			t.Errorf("VMM can see host path %s (stat: %v)", p, err)
		}
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Uid:\t65534\t65534\t65534\t65534", "Gid:\t65534\t65534\t65534\t65534", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(string(status), want) {
			t.Errorf("VMM status lacks %q", want)
		}
	}
	for _, ns := range []string{"mnt", "pid", "net"} {
		self, _ := os.Readlink("/proc/self/ns/" + ns)
		vmm, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		if self == vmm || vmm == "" {
			t.Errorf("VMM shares the daemon's %s namespace (%s)", ns, vmm)
		}
	}
	// And as its user it could not read the host's files even with a path:
	// the shadow file is root-only (a host-side check with its credentials).
	cmd := exec.Command("cat", "/etc/shadow")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: NobodyID, Gid: NobodyID}}
	if err := cmd.Run(); err == nil {
		t.Errorf("uid %d can read /etc/shadow on this host", NobodyID)
	}
}

// TestProbe boots the probe guest under TCG (always available) and checks
// that a "kvm" probe either boots or explains why not - on hosts without
// hardware virtualisation it must fail rather than hang.
func TestProbe(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	qemu, err := lookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatalf("qemu-system-x86_64: %v", err)
	}
	cfg := ProbeConfig{QEMU: qemu, Kernel: fixture.kernel, Agent: fixture.agent, CacheDir: t.TempDir(), Accel: "tcg", Timeout: time.Minute}
	if err := Probe(ctx, cfg); err != nil {
		t.Fatalf("TCG probe: %v", err)
	}
	t0 := time.Now()
	cfg.Accel, cfg.Timeout = "kvm", 3*time.Second
	err = Probe(ctx, cfg)
	t.Logf("KVM probe: %v (%s)", err, time.Since(t0).Round(time.Millisecond))
	if err != nil && err.Error() == "" {
		t.Error("KVM probe failed without a reason")
	}
}

// TestCheckpointRestore pauses a microVM (device state only; RAM stays in
// its memory file) and resumes it: processes and files survive.
func TestCheckpointRestore(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const id = "mvmtest2"
	r, ep, spec := bootVM(t, ctx, runtime.Spec{ID: id, Resources: runtime.Resources{MemoryMB: 256}})
	dir := spec.Dir
	pid, _ := guestRun(t, ctx, ep.GuestIP, "sleep 1000 >/dev/null 2>&1 & echo $!; echo kept > /tmp/kept")
	img := filepath.Join(dir, "checkpoint")
	t0 := time.Now()
	if err := r.Checkpoint(ctx, id, dir, img); err != nil {
		t.Fatalf("Checkpoint: %v\nconsole:\n%s", err, runtime.LogTail(ConsolePath(dir), 2048))
	}
	t.Logf("checkpoint took %s", time.Since(t0))
	if fi, err := os.Stat(filepath.Join(img, stateFile)); err != nil || fi.Size() > 1<<20 {
		t.Errorf("state file: %v, %v (want a small device-state file)", fi, err)
	}
	if st, err := r.State(ctx, id); err == nil && st == runtime.StateRunning {
		t.Fatalf("State after Checkpoint = %v", st)
	}
	time.Sleep(3 * time.Second) // paused for a while: the guest clock must not lag behind
	t0 = time.Now()
	if err := r.Restore(ctx, runtime.Spec{ID: id, Dir: dir, NetNSPath: ep.NetNSPath}, img); err != nil {
		t.Fatalf("Restore: %v\nconsole:\n%s", err, runtime.LogTail(ConsolePath(dir), 2048))
	}
	restored := time.Since(t0)
	if err := waitAgent(ctx, r, id, ep.GuestIP); err != nil {
		t.Fatalf("after restore: %v", err)
	}
	t.Logf("restore took %s, agent answering after %s", restored, time.Since(t0))
	if out, code := guestRun(t, ctx, ep.GuestIP, "kill -0 "+pid+" && cat /tmp/kept"); code != 0 || out != "kept" {
		t.Errorf("after restore: %q (exit %d), want the process and the file kept", out, code)
	}
	if err := r.Signal(ctx, id, syscall.SIGUSR1); err != nil {
		t.Errorf("Signal(SIGUSR1) = %v", err)
	}
	// The restored guest's clock is set from the host's (SIGUSR1 → /freeze).
	out, _ := guestRun(t, ctx, ep.GuestIP, "date +%s")
	if lag := int(time.Now().Unix()) - atoi(out); lag > 2 || lag < -2 {
		t.Errorf("guest clock after a 3 s pause: %d s behind the host", lag)
	}
}

// TestGuestPanicIsReported crashes the guest's init (the agent, with
// SIGABRT): the guest kernel panics, panic=-1 reboots, -no-reboot ends the
// VMM, and the sandbox reads as stopped with the reason.
func TestGuestPanicIsReported(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const id = "mvmtest3"
	r, ep, spec := bootVM(t, ctx, runtime.Spec{ID: id})
	dir := spec.Dir
	c := (&guest.Client{}).Process(ep.GuestIP.String(), "", "root")
	req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "kill -ABRT 1"}}})
	// The stream dies with the guest; do not wait for TCP to notice.
	kctx, kcancel := context.WithTimeout(ctx, 3*time.Second)
	if stream, err := c.Start(kctx, req); err == nil {
		_, _ = guest.Receive(stream, guest.Events{UntilClose: true})
	}
	kcancel()
	// Emulated, the agent's goroutine dump on the serial console takes a
	// while before the kernel panics.
	killed := time.Now()
	deadline := killed.Add(150 * time.Second)
	for {
		if st, err := r.State(ctx, id); err == nil && st == runtime.StateStopped {
			t.Logf("stopped %s after the crash", time.Since(killed).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox still running 150 s after its init crashed\nconsole:\n%s", runtime.LogTail(ConsolePath(dir), 2048))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := 0; i < 100 && r.StopReason(id) == ""; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if reason := r.StopReason(id); !strings.Contains(reason, "panicked") {
		t.Errorf("StopReason = %q, want the guest kernel panic\nconsole:\n%s", reason, runtime.LogTail(ConsolePath(dir), 2048))
	}
	if fi, err := os.Stat(ConsolePath(dir)); err == nil {
		t.Logf("console log: %d bytes", fi.Size())
	}
}
