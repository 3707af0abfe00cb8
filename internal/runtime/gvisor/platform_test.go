//go:build linux

package gvisor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestChoosePlatform(t *testing.T) {
	ctx := context.Background()
	var probed []string
	probe := func(err error) PlatformProbe {
		return func(_ context.Context, p string) error {
			probed = append(probed, p)
			return err
		}
	}
	for _, tc := range []struct {
		mode       string
		probeErr   error
		want       string
		wantProbed bool
		reason     string
	}{
		{mode: "auto", want: PlatformSystrap, wantProbed: true, reason: "systrap probe ran"},
		{mode: "", want: PlatformSystrap, wantProbed: true, reason: "systrap probe ran"},
		{mode: "auto", probeErr: errors.New("seccomp refused"), want: PlatformPtrace, wantProbed: true, reason: "seccomp refused"},
		{mode: "systrap", probeErr: errors.New("never asked"), want: PlatformSystrap, reason: "--runsc-platform systrap"},
		{mode: "ptrace", want: PlatformPtrace, reason: "--runsc-platform ptrace"},
	} {
		probed = nil
		got, err := ChoosePlatform(ctx, tc.mode, probe(tc.probeErr))
		if err != nil {
			t.Fatalf("%q: %v", tc.mode, err)
		}
		if got.Platform != tc.want || !strings.Contains(got.Reason, tc.reason) {
			t.Errorf("%q (probe error %v): %+v, want %s with a reason containing %q", tc.mode, tc.probeErr, got, tc.want, tc.reason)
		}
		if tc.wantProbed != (len(probed) == 1 && probed[0] == PlatformSystrap) || len(probed) > 1 {
			t.Errorf("%q: probed %v", tc.mode, probed)
		}
	}
	if _, err := ChoosePlatform(ctx, "kvm", probe(nil)); err == nil {
		t.Error("kvm: no error")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := ChoosePlatform(cctx, "auto", probe(errors.New("killed"))); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled start: %v, want context.Canceled (not a silent ptrace fallback)", err)
	}
}

func TestPinnedVersion(t *testing.T) {
	v := PinnedVersion()
	if !strings.HasPrefix(v, "v0.0.0-") || strings.ContainsAny(v, " \n") {
		t.Fatalf("PinnedVersion() = %q", v)
	}
	if !strings.HasSuffix(DefaultRunscPath(), "/"+v+"/runsc") {
		t.Fatalf("DefaultRunscPath() = %q", DefaultRunscPath())
	}
}

// TestProbeChoosesSystrap: on this kind of host (no KVM needed) the pinned
// runsc starts a sandbox on systrap, so the daemon's default is systrap.
func TestProbeChoosesSystrap(t *testing.T) {
	needRoot(t)
	runsc := DefaultRunscPath()
	got, err := ChoosePlatform(context.Background(), "auto", func(ctx context.Context, p string) error {
		return ProbePlatform(ctx, runsc, p, 20*time.Second)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Platform != PlatformSystrap {
		t.Fatalf("probe chose %+v, want systrap", got)
	}
	t.Logf("%+v", got)
	// A platform runsc does not know fails the probe with runsc's message.
	if err := ProbePlatform(context.Background(), runsc, "no-such-platform", 20*time.Second); err == nil {
		t.Fatal("probe of an unknown platform succeeded")
	}
}
