//go:build linux

package gvisor

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/helperenv"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// PinnedVersion is the gVisor module version whose runsc Airlock runs
// (scripts/build-runsc.sh builds it from the same file).
//
//go:embed runsc.version
var pinnedVersion string

// PinnedVersion returns the pinned gVisor module version.
func PinnedVersion() string { return strings.TrimSpace(pinnedVersion) }

// DefaultRunscCache is where scripts/build-runsc.sh keeps its builds
// (<cache>/<version>/runsc); AIRLOCK_RUNSC_CACHE overrides it, as for the
// script.
const DefaultRunscCache = "/var/cache/airlock/runsc"

// DefaultRunscPath is the runsc that scripts/build-runsc.sh builds for
// PinnedVersion.
func DefaultRunscPath() string {
	cache := os.Getenv("AIRLOCK_RUNSC_CACHE")
	if cache == "" {
		cache = DefaultRunscCache
	}
	return filepath.Join(cache, PinnedVersion(), "runsc")
}

// Platforms runsc can use here. systrap is gVisor's default since 2023 and
// needs no KVM; ptrace is the fallback for hosts where systrap cannot
// start. kvm is not offered: it hangs on the development machines (PVM).
const (
	PlatformSystrap = "systrap"
	PlatformPtrace  = "ptrace"
)

// PlatformChoice is the runsc platform the runtime uses and why.
type PlatformChoice struct {
	Platform string
	Reason   string
}

// PlatformProbe starts a throw-away sandbox on platform and reports
// whether it ran.
type PlatformProbe func(ctx context.Context, platform string) error

// ChoosePlatform decides the platform for mode: "systrap" or "ptrace" are
// taken as given (no probe); "auto" (or "") probes systrap once and falls
// back to ptrace when it cannot start, saying why.
func ChoosePlatform(ctx context.Context, mode string, probe PlatformProbe) (PlatformChoice, error) {
	switch mode {
	case PlatformSystrap, PlatformPtrace:
		return PlatformChoice{Platform: mode, Reason: "--runsc-platform " + mode}, nil
	case "", "auto":
	default:
		return PlatformChoice{}, fmt.Errorf("unknown runsc platform %q (want auto, systrap or ptrace)", mode)
	}
	if probe == nil {
		return PlatformChoice{}, errors.New("gvisor: no platform probe")
	}
	t0 := time.Now()
	err := probe(ctx, PlatformSystrap)
	if err == nil {
		return PlatformChoice{Platform: PlatformSystrap, Reason: fmt.Sprintf("systrap probe ran in %d ms", time.Since(t0).Milliseconds())}, nil
	}
	if ctx.Err() != nil {
		return PlatformChoice{}, fmt.Errorf("probing the systrap platform: %w", ctx.Err())
	}
	return PlatformChoice{Platform: PlatformPtrace, Reason: fmt.Sprintf("systrap probe failed (%v); using ptrace (slower system calls)", err)}, nil
}

// ProbePlatform runs `/bin/true` of the host under runsc on platform with
// no network (`runsc do`: the host's root filesystem under a sandbox-private
// overlay, state in a temporary root dir). It returns runsc's error output
// when the sandbox did not run.
func ProbePlatform(ctx context.Context, runsc, platform string, timeout time.Duration) error {
	root, err := os.MkdirTemp("", "airlock-runsc-probe-")
	if err != nil {
		return fmt.Errorf("creating probe root dir: %w", err)
	}
	defer os.RemoveAll(root)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := helperenv.Command(ctx, runsc, "--root", root, "--platform", platform, "--network", "none",
		"--ignore-cgroups", "--gofer-network-namespace", "new", "do", "--quiet", "--cwd", "/", "/bin/true")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if len(msg) > 300 {
			msg = msg[len(msg)-300:]
		}
		if ctx.Err() != nil {
			return fmt.Errorf("runsc --platform=%s do /bin/true: no answer in %s: %w", platform, timeout, ctx.Err())
		}
		return fmt.Errorf("runsc --platform=%s do /bin/true: %w: %s", platform, err, msg)
	}
	return nil
}

var _ runtime.ImageBuilder = (*Runtime)(nil)

// ImageBuild implements runtime.ImageBuilder: "runsc-sha256:" and the first
// 16 hex digits of the runsc binary's SHA-256. A checkpoint image is only
// meant for the runsc that saved it; runsc's own check compares version
// strings, and builds from the module all report "VERSION_MISSING", so the
// binary itself is the identity. Hashed once.
func (r *Runtime) ImageBuild() string {
	r.buildOnce.Do(func() {
		f, err := os.Open(r.runsc)
		if err != nil {
			r.build = "runsc-unknown"
			return
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			r.build = "runsc-unknown"
			return
		}
		r.build = "runsc-sha256:" + hex.EncodeToString(h.Sum(nil))[:16]
	})
	return r.build
}
