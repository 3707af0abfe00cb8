package daemon

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/volume"
)

// Volumes are the --volume-* flags: where the node keeps volumes' data.
type Volumes struct {
	// Backing is --volume-backing: "loop" (a sparse ext4 image per
	// volume, its size the limit; internal/volume.Loop), "auto" (the
	// default: loop where the host has loop devices and mkfs.ext4, else
	// none, with a warning), "dir" (a plain directory per volume, its
	// size a limit of the content API only; volume.DirBacking, for a
	// filesystem the nodes of a cluster share) or "none" (no volumes on
	// this node; creates with volumeMounts answer 400, the volume API
	// 501).
	Backing string
	// DefaultSizeMB is --volume-size-default: a volume's size in MiB when
	// its create names none.
	DefaultSizeMB int
	// MaxSizeMB is --volume-size-max: the largest sizeMB a volume create
	// may ask for.
	MaxSizeMB int
}

// DefaultVolumeSizeMB is --volume-size-default's default.
const DefaultVolumeSizeMB = 5120

// DefaultVolumeMaxSizeMB is --volume-size-max's default (1 TiB).
const DefaultVolumeMaxSizeMB = 1 << 20

// openVolumes opens the Backing that --volume-backing selects (the one
// place it is chosen), under <data-dir>/volumes.
func (d *daemon) openVolumes() (volume.Backing, error) {
	root := filepath.Join(d.dataDir, "volumes")
	switch kind := d.cfg.Volumes.Backing; kind {
	case "", "auto", "loop":
		l, err := volume.OpenLoop(context.Background(), root, "", d.log.With("component", "volume"))
		if err != nil && kind == "loop" {
			return nil, fmt.Errorf("--volume-backing loop: %w", err)
		}
		if err != nil {
			d.log.Warn("no volumes on this node (--volume-backing auto)", "err", err)
			return nil, nil
		}
		l.DefaultSize = int64(max(d.cfg.Volumes.DefaultSizeMB, 0)) << 20
		return l, nil
	case "dir":
		b, err := volume.NewDirBacking(root)
		if err != nil {
			return nil, fmt.Errorf("--volume-backing dir: %w", err)
		}
		return b, nil
	case "none":
		return nil, nil
	}
	return nil, fmt.Errorf("invalid --volume-backing %q: want auto, loop, dir or none", d.cfg.Volumes.Backing)
}

// volumeAPI is what the volume API serves (nil without a Backing: the API
// answers 501): the store's records and this node's Backing b.
func (d *daemon) volumeAPI(b volume.Backing) (*api.Volumes, error) {
	if b == nil {
		return nil, nil
	}
	size, max := d.cfg.Volumes.DefaultSizeMB, d.cfg.Volumes.MaxSizeMB
	if size <= 0 {
		size = DefaultVolumeSizeMB
	}
	if max <= 0 {
		max = DefaultVolumeMaxSizeMB
	}
	if size > max {
		return nil, fmt.Errorf("--volume-size-default %d is larger than --volume-size-max %d", size, max)
	}
	return &api.Volumes{Store: d.st, Backing: b, DefaultSizeMB: int64(size), MaxSizeMB: int64(max)}, nil
}
