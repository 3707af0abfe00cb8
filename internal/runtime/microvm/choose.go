package microvm

import (
	"context"
	"fmt"
	"time"
)

// Choice is the isolation runtime a daemon runs with, and why.
type Choice struct {
	Runtime string // "microvm" or "gvisor"
	Accel   string // "kvm" or "tcg" for microvm, "" for gvisor
	Reason  string
}

// ProbeFunc boots a probe VM under accel (see Probe).
type ProbeFunc func(ctx context.Context, accel string) error

// Choose picks the runtime for mode ("auto", "microvm" or "gvisor"):
//   - auto: a microVM only when a probe guest boots under hardware KVM, else
//     gVisor (emulated VMs are too slow to be the default);
//   - microvm: under KVM when the probe boots, else emulated (TCG), saying so;
//   - gvisor: gVisor, no probe.
//
// probe is nil when microVMs cannot run at all (no guest kernel or VMM);
// why then says what is missing.
func Choose(ctx context.Context, mode string, probe ProbeFunc, why string) (Choice, error) {
	switch mode {
	case "gvisor":
		return Choice{Runtime: "gvisor", Reason: "--runtime gvisor"}, nil
	case "auto", "microvm":
	default:
		return Choice{}, fmt.Errorf("invalid --runtime %q: want auto, microvm or gvisor", mode)
	}
	if probe == nil {
		if mode == "microvm" {
			return Choice{}, fmt.Errorf("--runtime microvm: %s", why)
		}
		return Choice{Runtime: "gvisor", Reason: "microVMs unavailable: " + why}, nil
	}
	t0 := time.Now()
	err := probe(ctx, "kvm")
	if err == nil {
		return Choice{Runtime: "microvm", Accel: "kvm",
			Reason: fmt.Sprintf("a probe guest booted under KVM in %s", time.Since(t0).Round(time.Millisecond))}, nil
	}
	if mode == "auto" {
		return Choice{Runtime: "gvisor", Reason: "no hardware virtualisation (KVM probe: " + err.Error() + ")"}, nil
	}
	// Emulated: the same jailed probe must boot under TCG, or no microVM
	// this daemon hands out could start.
	t0 = time.Now()
	if terr := probe(ctx, "tcg"); terr != nil {
		return Choice{}, fmt.Errorf("--runtime microvm: the KVM probe failed (%v) and the emulated (TCG) probe failed too: %w", err, terr)
	}
	return Choice{Runtime: "microvm", Accel: "tcg",
		Reason: fmt.Sprintf("KVM probe failed (%s): microVMs run emulated (TCG), several times slower than under KVM (TCG probe booted in %s)",
			err, time.Since(t0).Round(time.Millisecond))}, nil
}
