package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/gvisor"
	"github.com/airlock-sandbox/airlock/internal/runtime/microvm"
)

// DefaultKernelCache is where scripts/build-kernel.sh puts guest kernels.
const DefaultKernelCache = "/var/cache/airlock/kernel"

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
	paths, _ := filepath.Glob(filepath.Join(DefaultKernelCache, "*", "vmlinux"))
	var best string
	var bestT time.Time
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.ModTime().After(bestT) {
			best, bestT = p, fi.ModTime()
		}
	}
	if best == "" {
		return "", fmt.Errorf("no guest kernel in %s (run scripts/build-kernel.sh)", DefaultKernelCache)
	}
	return best, nil
}

// newRuntime picks and starts the isolation runtime for --runtime mode
// (microvm.Choose), logging the decision and its reason.
func newRuntime(ctx context.Context, mode, kernelFlag string, gf gvisorFlags, dataDir, envdPath string, log *slog.Logger) (runtime.Runtime, runtimeChoice, error) {
	var probe microvm.ProbeFunc
	why := ""
	kernel, err := findKernel(kernelFlag)
	qemu, qerr := exec.LookPath("qemu-system-x86_64")
	switch {
	case mode == "gvisor":
	case err != nil:
		why = err.Error()
	case qerr != nil:
		why = "qemu-system-x86_64 not found (apt-get install qemu-system-x86)"
	default:
		cache := filepath.Join(dataDir, "microvm", "images")
		probe = func(ctx context.Context, accel string) error {
			return microvm.Probe(ctx, qemu, kernel, envdPath, cache, accel, kvmProbeTimeout)
		}
	}
	mchoice, err := microvm.Choose(ctx, mode, probe, why)
	choice := runtimeChoice{Choice: mchoice}
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
	rt, err := gvisor.New(gcfg, log.With("component", "gvisor"))
	if err != nil {
		return nil, choice, fmt.Errorf("starting gvisor runtime: %w", err)
	}
	return rt, choice, nil
}
