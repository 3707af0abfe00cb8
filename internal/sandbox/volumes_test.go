package sandbox_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/volume"
)

// mountingRuntime is the fake runtime that states it mounts volumes.
type mountingRuntime struct{ *sandboxtest.Runtime }

func (mountingRuntime) MountsVolumes() bool { return true }

// dirBacking is a Backing of fixed directories.
type dirBacking map[string]string

func (b dirBacking) Create(context.Context, string, int64) error { return nil }
func (b dirBacking) Delete(context.Context, string) error        { return nil }
func (b dirBacking) Usage(context.Context, string) (int64, int64, error) {
	return 0, 0, nil
}
func (b dirBacking) Dir(_ context.Context, id string) (string, error) {
	if d, ok := b[id]; ok {
		return d, nil
	}
	return "", volume.ErrNotFound
}

func volumeEnv(t *testing.T, mounts bool) (*sandboxtest.Env, dirBacking) {
	b := dirBacking{"vol1": t.TempDir()}
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) {
		if mounts {
			c.Runtime = mountingRuntime{c.Runtime.(*sandboxtest.Runtime)}
		}
		c.Volumes = b
	})
	return env, b
}

// TestCreateWithVolumes: a create's volume mounts reach the runtime as the
// volumes' host directories and stay in the sandbox (its view and its
// store row, which forks, snapshots and resumes read).
func TestCreateWithVolumes(t *testing.T) {
	env, b := volumeEnv(t, true)
	vm := []volume.Mount{{VolumeID: "vol1", Name: "data", Path: "/mnt/data"}}
	sb := create(t, env, sandbox.CreateRequest{VolumeMounts: vm})
	want := []runtime.Mount{{Source: b["vol1"], Destination: "/mnt/data"}}
	if got := env.Runtime.SpecOf(sb.ID).Mounts; !slices.Equal(got, want) {
		t.Fatalf("runtime mounts %+v, want %+v", got, want)
	}
	if !slices.Equal(sb.VolumeMounts, vm) {
		t.Fatalf("sandbox mounts %+v", sb.VolumeMounts)
	}
	l, err := env.Manager.Lookup(sb.ID)
	if err != nil || !slices.Equal(l.View().VolumeMounts, vm) {
		t.Fatalf("Lookup: %v", err)
	}
	rec, err := env.Store.GetSandbox(context.Background(), sb.ID)
	if err != nil || !strings.Contains(rec.Extra, `"volumes":[{"volumeID":"vol1"`) {
		t.Fatalf("store row extra %q %v", rec.Extra, err)
	}
	// A create without volumes has none.
	if sb := create(t, env, sandbox.CreateRequest{}); len(sb.VolumeMounts) != 0 || len(env.Runtime.SpecOf(sb.ID).Mounts) != 0 {
		t.Fatalf("mounts without volumes: %+v", sb.VolumeMounts)
	}
}

// TestCreateWithVolumesRefused: an unknown volume, a bad mount path and a
// runtime that cannot mount are 400s, before anything is started.
func TestCreateWithVolumesRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mounts bool
		vm     volume.Mount
	}{
		{"unknown volume", true, volume.Mount{VolumeID: "nope", Name: "nope", Path: "/mnt/x"}},
		{"over /proc", true, volume.Mount{VolumeID: "vol1", Name: "data", Path: "/proc/x"}},
		{"relative", true, volume.Mount{VolumeID: "vol1", Name: "data", Path: "mnt"}},
		{"runtime without mounts", false, volume.Mount{VolumeID: "vol1", Name: "data", Path: "/mnt/x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, _ := volumeEnv(t, tc.mounts)
			_, err := env.Manager.Create(context.Background(), sandbox.CreateRequest{Timeout: time.Minute, VolumeMounts: []volume.Mount{tc.vm}})
			ue, ok := sandbox.AsUserError(err)
			if !ok || ue.Code != http.StatusBadRequest {
				t.Fatalf("Create: %v, want a 400", err)
			}
			if len(env.Runtime.Specs) != 0 {
				t.Fatalf("a runtime start happened: %v", env.Runtime.Specs)
			}
		})
	}
}
