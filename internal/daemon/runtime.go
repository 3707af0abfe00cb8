package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/helperenv"
	"github.com/airlock-sandbox/airlock/internal/imagebuild"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/gvisor"
	"github.com/airlock-sandbox/airlock/internal/runtime/microvm"
)

// DefaultKernelCache is where scripts/build-kernel.sh puts guest kernels
// unless $AIRLOCK_KERNEL_CACHE names another directory.
const DefaultKernelCache = "/var/cache/airlock/kernel"

// kernelCache is the directory scripts/build-kernel.sh writes to: the
// same $AIRLOCK_KERNEL_CACHE it reads, else DefaultKernelCache.
func kernelCache() string {
	if d := os.Getenv("AIRLOCK_KERNEL_CACHE"); d != "" {
		return d
	}
	return DefaultKernelCache
}

// kvmProbeTimeout bounds the KVM boot probe (a guest on real KVM reaches
// its init in well under a second).
const kvmProbeTimeout = 8 * time.Second

// findKernel returns the guest kernel: flag, else the newest vmlinux that
// scripts/build-kernel.sh left in its cache.
func findKernel(flag string) (string, error) {
	if flag != "" {
		if _, err := os.Stat(flag); err != nil {
			return "", fmt.Errorf("--microvm-kernel: %w", err)
		}
		return flag, nil
	}
	cache := kernelCache()
	paths, _ := filepath.Glob(filepath.Join(cache, "*", "vmlinux"))
	var best string
	var bestT time.Time
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.ModTime().After(bestT) {
			best, bestT = p, fi.ModTime()
		}
	}
	if best == "" {
		return "", fmt.Errorf("no guest kernel in %s (run scripts/build-kernel.sh)", cache)
	}
	return best, nil
}

// newRuntime picks and starts the isolation runtime for --runtime mode
// (microvm.Choose), logging the decision and its reason. The runtime's
// branch also sets the layer source of Dockerfile builds: gVisor's
// writable layer is a host directory, a microVM's is its exported disk.
func newRuntime(ctx context.Context, mode, kernelFlag string, gf GVisor, dataDir, envdPath string, log *slog.Logger) (runtime.Runtime, runtimeInfo, error) {
	var probe microvm.ProbeFunc
	var kernel, why string
	if mode != "gvisor" {
		kernel, probe, why = microvmProbe(ctx, mode, kernelFlag, dataDir, envdPath, log)
	}
	mchoice, err := microvm.Choose(ctx, mode, probe, why)
	choice := runtimeInfo{Choice: mchoice}
	if err != nil {
		return nil, choice, err
	}
	log.Info("isolation runtime", "runtime", choice.Runtime, "accel", choice.Accel, "reason", choice.Reason)
	if choice.Runtime == "microvm" {
		rt, err := microvm.New(microvm.Config{Root: filepath.Join(dataDir, "microvm"), KernelPath: kernel, Accel: choice.Accel},
			log.With("component", "microvm"))
		if err != nil {
			return nil, choice, fmt.Errorf("starting microvm runtime: %w", err)
		}
		choice.layers = imagebuild.NewDiskSource(rt, log.With("component", "imagebuild"))
		return rt, choice, nil
	}
	// AIRLOCK_RUNSC_DEBUG_LOG=<dir> keeps runsc's debug logs per sandbox
	// (<dir>/<id>/) for diagnosing the runtime itself.
	gcfg, pc, err := gvisorConfig(ctx, gf, log)
	if err != nil {
		return nil, choice, err
	}
	choice.Platform, choice.PlatformReason = pc.Platform, pc.Reason
	gcfg.Root, gcfg.DebugLogDir = filepath.Join(dataDir, "runsc"), os.Getenv("AIRLOCK_RUNSC_DEBUG_LOG")
	gcfg.CgroupParent = gf.cgroupParent
	gcfg.PodInitConfig = gf.podInit
	rt, err := gvisor.New(gcfg, log.With("component", "gvisor"))
	if err != nil {
		return nil, choice, fmt.Errorf("starting gvisor runtime: %w", err)
	}
	choice.layers = imagebuild.UpperDir(gvisor.UpperDir)
	return rt, choice, nil
}

// microvmProbe checks what microVMs need before any probe VM boots - a
// static agent, QEMU, a guest kernel (built here, with progress on stderr,
// when --runtime microvm is asked for, or auto on a host with hardware
// virtualisation, and none is cached) - and returns the kernel and the
// boot probe, or a nil probe and why microVMs cannot run.
func microvmProbe(ctx context.Context, mode, kernelFlag, dataDir, envdPath string, log *slog.Logger) (string, microvm.ProbeFunc, string) {
	if err := microvm.CheckAgent(envdPath); err != nil {
		return "", nil, err.Error()
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return "", nil, "qemu-system-x86_64 not found (apt-get install qemu-system-x86)"
	}
	kernel, err := findKernel(kernelFlag)
	if err != nil && kernelFlag == "" {
		if mode == "auto" && !hardwareVirt() {
			return "", nil, "no hardware virtualisation (no vmx/svm CPU flag) and no guest kernel built (" + err.Error() + ")"
		}
		kernel, err = buildKernel(ctx, log)
	}
	if err != nil {
		return "", nil, err.Error()
	}
	cache := filepath.Join(dataDir, "microvm", "images")
	hw := hardwareVirt()
	return kernel, func(ctx context.Context, accel string) error {
		if accel == "kvm" && !hw {
			// A software /dev/kvm (PVM) or none: stock guest kernels
			// cannot run there, and the probe would only time out.
			return errors.New("no vmx/svm CPU flag")
		}
		timeout := kvmProbeTimeout
		if accel == "tcg" {
			timeout = tcgProbeTimeout
		}
		return microvm.Probe(ctx, microvm.ProbeConfig{QEMU: qemu, Kernel: kernel, Agent: envdPath, CacheDir: cache,
			Accel: accel, Timeout: timeout})
	}, ""
}

// tcgProbeTimeout bounds the emulated boot probe (about 1 s on an idle
// host, several on a busy one).
const tcgProbeTimeout = 60 * time.Second

// hardwareVirt reports whether the CPU advertises hardware virtualisation
// (vmx or svm); without it /dev/kvm, if present, is a software hypervisor
// stock guest kernels cannot run on.
func hardwareVirt() bool {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "flags") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if f == "vmx" || f == "svm" {
				return true
			}
		}
		return false
	}
	return false
}

// buildKernel runs scripts/build-kernel.sh (next to this executable's
// directory, as in a source checkout: bin/airlock → scripts/) once, its
// progress on stderr, and returns the vmlinux it printed last.
func buildKernel(ctx context.Context, log *slog.Logger) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("no guest kernel in %s, and this executable cannot be located to build one: %w", kernelCache(), err)
	}
	script := filepath.Join(filepath.Dir(filepath.Dir(exe)), "scripts", "build-kernel.sh")
	if _, err := os.Stat(script); err != nil {
		return "", fmt.Errorf("no guest kernel in %s (build one with scripts/build-kernel.sh from the source tree, or pass --microvm-kernel)", kernelCache())
	}
	log.Info("building the microVM guest kernel (once per host; a few minutes, progress below)", "script", script)
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = helperenv.Env(helperenv.Pass("HOME", "AIRLOCK_KERNEL_CACHE")...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building the guest kernel (%s): %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	kernel := lines[len(lines)-1]
	if _, err := os.Stat(kernel); err != nil {
		return "", fmt.Errorf("the guest kernel build printed %q, which is no file: %w", kernel, err)
	}
	log.Info("guest kernel built", "path", kernel, "elapsed", time.Since(t0).Round(time.Second))
	return kernel, nil
}
