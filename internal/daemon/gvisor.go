package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/imagebuild"
	"github.com/airlock-sandbox/airlock/internal/runtime/gvisor"
	"github.com/airlock-sandbox/airlock/internal/runtime/microvm"
)

// GVisor configures the gVisor runtime (--runsc, --runsc-platform).
type GVisor struct {
	// Runsc is the runsc binary ("" = the pinned build of
	// scripts/build-runsc.sh).
	Runsc string
	// Platform is auto (probe systrap, else ptrace), systrap or ptrace.
	Platform string
	// cgroupParent is set by the daemon, not a flag: a cluster node's
	// sandboxes get a cgroup parent of their own (gvisor.Config.CgroupParent).
	cgroupParent string
	// podInit is set by the daemon: the activity feed's trace session
	// (gvisor.Config.PodInitConfig).
	podInit string
}

// platformProbeTimeout bounds the systrap probe (a `runsc do /bin/true`
// takes ~0.2 s).
const platformProbeTimeout = 20 * time.Second

// runtimeInfo is the isolation runtime chosen at start and, for gVisor,
// the runsc platform and why, with where a Dockerfile build takes the
// layer a RUN step wrote (each runtime's constructor says).
type runtimeInfo struct {
	microvm.Choice
	Platform, PlatformReason string
	layers                   imagebuild.LayerSource
}

// gvisorConfig resolves the runsc binary and probes its platform.
func gvisorConfig(ctx context.Context, g GVisor, log *slog.Logger) (gvisor.Config, gvisor.PlatformChoice, error) {
	runsc := g.Runsc
	if runsc == "" {
		runsc = gvisor.DefaultRunscPath()
	}
	waitRunscBuild(ctx, runsc, log)
	if _, err := exec.LookPath(runsc); err != nil {
		return gvisor.Config{}, gvisor.PlatformChoice{}, fmt.Errorf("runsc (gVisor %s; build it with scripts/build-runsc.sh, or pass --runsc): %w", gvisor.PinnedVersion(), err)
	}
	pc, err := gvisor.ChoosePlatform(ctx, g.Platform, func(ctx context.Context, platform string) error {
		return gvisor.ProbePlatform(ctx, runsc, platform, platformProbeTimeout)
	})
	if err != nil {
		return gvisor.Config{}, pc, fmt.Errorf("choosing the runsc platform: %w", err)
	}
	log.Info("gvisor platform", "runsc", runsc, "platform", pc.Platform, "reason", pc.Reason)
	return gvisor.Config{RunscPath: g.Runsc, Platform: pc.Platform}, pc, nil
}

// runscBuildWait bounds how long a start waits for a runsc build that is
// under way (scripts/build-runsc.sh takes a few minutes on a fresh host).
const runscBuildWait = 20 * time.Minute

// waitRunscBuild waits while runsc is missing and scripts/build-runsc.sh is
// building it: its lock (CACHE/.lock for CACHE/VERSION/runsc) is held. On a
// fresh host scripts/run-daemon.sh starts the daemon before that build ends,
// so the default templates build meanwhile. Returns at once otherwise.
func waitRunscBuild(ctx context.Context, runsc string, log *slog.Logger) {
	if _, err := os.Stat(runsc); err == nil || !filepath.IsAbs(runsc) {
		return
	}
	lock := filepath.Join(filepath.Dir(filepath.Dir(runsc)), ".lock")
	f, err := os.Open(lock)
	if err != nil {
		return // no build ever ran here
	}
	defer f.Close()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB) == nil {
		return // not building now
	}
	start := time.Now()
	log.Info("runsc is being built (scripts/build-runsc.sh); waiting for it", "runsc", runsc)
	ctx, cancel := context.WithTimeout(ctx, runscBuildWait)
	defer cancel()
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			log.Warn("gave up waiting for the runsc build", "waited", time.Since(start).Round(time.Second))
			return
		case <-t.C:
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB) == nil {
			log.Info("runsc build done", "waited", time.Since(start).Round(time.Second))
			return
		}
	}
}
