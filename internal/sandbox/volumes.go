package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/volume"
)

// Volumes in sandboxes. A create's VolumeMounts (resolved to volume ids by
// the API) are kept in the sandbox's record (extra.Volumes) and become
// runtime mounts of the volumes' host directories (Config.Volumes'
// Backing.Dir): at a cold boot, and at every restore of a memory image
// that holds them (fork children, creates from a named snapshot, a
// sandbox resumed on another node), which take them from the parent's
// record or the snapshot. A pause keeps the runtime's bundle and so its
// mounts. Boot snapshots and the warm pool have no volumes: a create with
// volumes cold-boots (createFromBoot).

// runtimeMounts resolves vols to host directories.
func (m *Manager) runtimeMounts(ctx context.Context, vols []volume.Mount) ([]runtime.Mount, error) {
	if len(vols) == 0 {
		return nil, nil
	}
	if vm, ok := m.cfg.Runtime.(runtime.VolumeMounter); !ok || !vm.MountsVolumes() {
		return nil, userErrorf(http.StatusBadRequest, "volume mounts are not supported on the %s runtime yet", m.cfg.Runtime.Name())
	}
	if m.cfg.Volumes == nil {
		return nil, userErrorf(http.StatusBadRequest, "volume mounts are not available on this node (no volume storage configured)")
	}
	out := make([]runtime.Mount, 0, len(vols))
	for _, v := range vols {
		dir, err := m.cfg.Volumes.Dir(ctx, v.VolumeID)
		if errors.Is(err, volume.ErrNotFound) {
			return nil, userErrorf(http.StatusBadRequest, "volume '%s' not found", v.Name)
		}
		var be *volume.BucketError // a bucket volume's bucket refused its mount
		if errors.As(err, &be) {
			return nil, userErrorf(http.StatusBadRequest, "volume '%s': %s", v.Name, be.Msg)
		}
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.VolumeID, err)
		}
		out = append(out, runtime.Mount{Source: dir, Destination: v.Path, ReadOnly: v.ReadOnly})
	}
	if err := runtime.CheckMounts(out); err != nil {
		return nil, userErrorf(http.StatusBadRequest, "invalid volume mounts: %v", err)
	}
	return out, nil
}

// mountUserError turns a runtime's refusal of one of vols
// (runtime.MountError, e.g. a microVM's NFS server refusing a volume's
// file system) into a 400 naming the volume; other errors pass.
func mountUserError(err error, vols []volume.Mount) error {
	var me *runtime.MountError
	if err == nil || !errors.As(err, &me) {
		return err
	}
	name := "?"
	if me.Index >= 0 && me.Index < len(vols) {
		name = vols[me.Index].Name
	}
	reason := "its file system cannot be served" // no host path in a user message
	var errno syscall.Errno
	if errors.As(me.Err, &errno) {
		reason += ": " + errno.Error()
	}
	return userErrorf(http.StatusBadRequest, "volume '%s' cannot be mounted in this sandbox: %s", name, reason)
}
