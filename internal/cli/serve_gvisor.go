package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"time"

	"github.com/spf13/pflag"

	"github.com/airlock-sandbox/airlock/internal/runtime/gvisor"
	"github.com/airlock-sandbox/airlock/internal/runtime/microvm"
)

// gvisorFlags are the serve flags of the gVisor runtime.
type gvisorFlags struct {
	// runsc is the runsc binary ("" = the pinned build of
	// scripts/build-runsc.sh).
	runsc string
	// platform is auto (probe systrap, else ptrace), systrap or ptrace.
	platform string
}

func addGVisorFlags(f *pflag.FlagSet, g *gvisorFlags) {
	f.StringVar(&g.runsc, "runsc", "", "runsc binary of the gvisor runtime (default: the pinned build of scripts/build-runsc.sh, "+gvisor.DefaultRunscPath()+")")
	f.StringVar(&g.platform, "runsc-platform", "auto", "runsc platform: auto (systrap when a probe sandbox starts on it, else ptrace), systrap or ptrace")
}

// platformProbeTimeout bounds the systrap probe (a `runsc do /bin/true`
// takes ~0.2 s).
const platformProbeTimeout = 20 * time.Second

// runtimeChoice is the isolation runtime chosen at start and, for gVisor,
// the runsc platform and why.
type runtimeChoice struct {
	microvm.Choice
	Platform, PlatformReason string
}

// gvisorConfig resolves the runsc binary and probes its platform.
func gvisorConfig(ctx context.Context, g gvisorFlags, log *slog.Logger) (gvisor.Config, gvisor.PlatformChoice, error) {
	runsc := g.runsc
	if runsc == "" {
		runsc = gvisor.DefaultRunscPath()
	}
	if _, err := exec.LookPath(runsc); err != nil {
		return gvisor.Config{}, gvisor.PlatformChoice{}, fmt.Errorf("runsc (gVisor %s; build it with scripts/build-runsc.sh, or pass --runsc): %w", gvisor.PinnedVersion(), err)
	}
	pc, err := gvisor.ChoosePlatform(ctx, g.platform, func(ctx context.Context, platform string) error {
		return gvisor.ProbePlatform(ctx, runsc, platform, platformProbeTimeout)
	})
	if err != nil {
		return gvisor.Config{}, pc, fmt.Errorf("choosing the runsc platform: %w", err)
	}
	log.Info("gvisor platform", "runsc", runsc, "platform", pc.Platform, "reason", pc.Reason)
	return gvisor.Config{RunscPath: g.runsc, Platform: pc.Platform}, pc, nil
}
