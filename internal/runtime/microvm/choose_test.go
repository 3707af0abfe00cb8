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
	cases := []struct {
		mode         string
		probe        ProbeFunc
		runtime, acc string
		reason       string
	}{
		{"auto", ok, "microvm", "kvm", "booted under KVM"},
		{"auto", fail, "gvisor", "", "no hardware virtualisation (KVM probe: KVM internal error)"},
		{"auto", nil, "gvisor", "", "microVMs unavailable: no kernel"},
		{"microvm", ok, "microvm", "kvm", "booted under KVM"},
		{"microvm", fail, "microvm", "tcg", "emulated (TCG)"},
		{"gvisor", ok, "gvisor", "", "--runtime gvisor"},
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
		if c.mode != "gvisor" && c.probe != nil && (len(accels) != 1 || accels[0] != "kvm") {
			t.Errorf("Choose(%s) probed %v, want one kvm probe", c.mode, accels)
		}
		if c.mode == "gvisor" && len(accels) != 0 {
			t.Errorf("--runtime gvisor probed %v", accels)
		}
	}
	if _, err := Choose(context.Background(), "microvm", nil, "no kernel"); err == nil || !strings.Contains(err.Error(), "no kernel") {
		t.Errorf("microvm without a kernel: err = %v, want it to say why", err)
	}
	if _, err := Choose(context.Background(), "firecracker", ok, ""); err == nil {
		t.Error("unknown mode accepted")
	}
}
