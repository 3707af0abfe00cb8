package microvm

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestChoose(t *testing.T) {
	ok := func(context.Context, string) error { return nil }
	fail := func(context.Context, string) error { return errors.New("KVM internal error") }
	kvmOnlyFails := func(_ context.Context, accel string) error {
		if accel == "kvm" {
			return errors.New("KVM internal error")
		}
		return nil
	}
	cases := []struct {
		mode         string
		probe        ProbeFunc
		runtime, acc string
		reason       string
		probed       []string
	}{
		{"auto", ok, "microvm", "kvm", "booted under KVM", []string{"kvm"}},
		{"auto", fail, "gvisor", "", "no hardware virtualisation (KVM probe: KVM internal error)", []string{"kvm"}},
		{"auto", nil, "gvisor", "", "microVMs unavailable: no kernel", nil},
		{"microvm", ok, "microvm", "kvm", "booted under KVM", []string{"kvm"}},
		{"microvm", kvmOnlyFails, "microvm", "tcg", "emulated (TCG)", []string{"kvm", "tcg"}},
		{"gvisor", ok, "gvisor", "", "--runtime gvisor", nil},
	}
	for _, c := range cases {
		var accels []string
		probe := c.probe
		if probe != nil {
			probe = func(ctx context.Context, accel string) error {
				accels = append(accels, accel)
				return c.probe(ctx, accel)
			}
		}
		got, err := Choose(context.Background(), c.mode, probe, "no kernel")
		if err != nil {
			t.Fatalf("Choose(%s): %v", c.mode, err)
		}
		if got.Runtime != c.runtime || got.Accel != c.acc || !strings.Contains(got.Reason, c.reason) {
			t.Errorf("Choose(%s) = %+v, want %s/%s with reason containing %q", c.mode, got, c.runtime, c.acc, c.reason)
		}
		if strings.Join(accels, ",") != strings.Join(c.probed, ",") {
			t.Errorf("Choose(%s) probed %v, want %v", c.mode, accels, c.probed)
		}
	}
	// --runtime microvm where not even the emulated probe boots (a device
	// the jailed VMM cannot open, a broken agent): refuse to start.
	if _, err := Choose(context.Background(), "microvm", fail, ""); err == nil || !strings.Contains(err.Error(), "TCG") {
		t.Errorf("microvm with both probes failing: err = %v, want a refusal naming the TCG probe", err)
	}
	if _, err := Choose(context.Background(), "microvm", nil, "no kernel"); err == nil || !strings.Contains(err.Error(), "no kernel") {
		t.Errorf("microvm without a kernel: err = %v, want it to say why", err)
	}
	if _, err := Choose(context.Background(), "firecracker", ok, ""); err == nil {
		t.Error("unknown mode accepted")
	}
}
