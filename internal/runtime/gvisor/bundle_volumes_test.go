package gvisor

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// TestBuildSpecVolumes: volume mounts become bind mounts (nosuid, nodev;
// ro when asked) after the runtime's own mounts.
func TestBuildSpecVolumes(t *testing.T) {
	spec := runtime.Spec{ID: "v", AgentPath: "/opt/envd", Mounts: []runtime.Mount{
		{Source: "/data/volumes/a/mnt/data", Destination: "/mnt/data"},
		{Source: "/data/volumes/b/mnt/data", Destination: "/ro", ReadOnly: true},
	}}
	s := buildSpec(spec, "/d/rootfs", effectiveLimits(spec.Resources, 0), "/airlock/v")
	want := []specs.Mount{
		{Destination: "/mnt/data", Type: "bind", Source: "/data/volumes/a/mnt/data", Options: []string{"rbind", "rw", "nosuid", "nodev"}},
		{Destination: "/ro", Type: "bind", Source: "/data/volumes/b/mnt/data", Options: []string{"rbind", "ro", "nosuid", "nodev"}},
	}
	var got []specs.Mount
	for _, m := range s.Mounts {
		if m.Destination == "/mnt/data" || m.Destination == "/ro" {
			got = append(got, m)
		}
	}
	if !slices.EqualFunc(got, want, func(a, b specs.Mount) bool {
		return a.Destination == b.Destination && a.Type == b.Type && a.Source == b.Source && slices.Equal(a.Options, b.Options)
	}) {
		t.Fatalf("volume mounts %+v, want %+v", got, want)
	}
}
