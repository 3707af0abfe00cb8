package daemon

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/volume"
)

// Volumes are the --volume-* flags: where the node keeps volumes' data.
type Volumes struct {
	// Backing is --volume-backing: "loop" (a sparse ext4 image per
	// volume, its size the limit; internal/volume.Loop), "auto" (the
	// default: loop where the host has loop devices and mkfs.ext4, else
	// none, with a warning) or "none" (no volumes on this node; creates
	// with volumeMounts answer 400).
	Backing string
	// DefaultSizeMB is --volume-size-default: a volume's size in MiB when
	// its create names none.
	DefaultSizeMB int
}

// DefaultVolumeSizeMB is --volume-size-default's default.
const DefaultVolumeSizeMB = 5120

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
	case "none":
		return nil, nil
	}
	return nil, fmt.Errorf("invalid --volume-backing %q: want auto, loop or none", d.cfg.Volumes.Backing)
}
