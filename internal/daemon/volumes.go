package daemon

import (
	"fmt"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/volume"
)

// Volumes configures E2B volumes (the --volume-* flags).
type Volumes struct {
	// Backing is --volume-backing: where volumes keep their data on this
	// host (newVolumeBacking).
	Backing string
	// DefaultSizeMB is --volume-default-size-mb, a volume's size limit
	// when its create names none; MaxSizeMB is --volume-max-size-mb.
	DefaultSizeMB, MaxSizeMB int64
}

// Volume backings --volume-backing takes.
const (
	// VolumeBackingDir keeps each volume as a plain directory under
	// <data-dir>/volumes (volume.DirBacking): its size limit holds for
	// the content API only; the form for a filesystem the nodes of a
	// cluster share.
	VolumeBackingDir = "dir"
)

// DefaultVolumeSizeMB is a volume's size limit when neither the create nor
// --volume-default-size-mb names one.
const DefaultVolumeSizeMB = 10 << 10

// newVolumeBacking is the one place the --volume-backing flag picks how a
// volume's data is kept on this host.
func (d *daemon) newVolumeBacking() (volume.Backing, error) {
	root := filepath.Join(d.dataDir, "volumes")
	switch d.cfg.Volumes.Backing {
	case "", VolumeBackingDir:
		return volume.NewDirBacking(root)
	default:
		return nil, fmt.Errorf("--volume-backing %q: want %s", d.cfg.Volumes.Backing, VolumeBackingDir)
	}
}

// openVolumes sets d.volumes up: the store's volume records and this
// host's backing.
func (d *daemon) openVolumes() error {
	b, err := d.newVolumeBacking()
	if err != nil {
		return err
	}
	size := d.cfg.Volumes.DefaultSizeMB
	if size <= 0 {
		size = DefaultVolumeSizeMB
	}
	if max := d.cfg.Volumes.MaxSizeMB; max > 0 && size > max {
		return fmt.Errorf("--volume-default-size-mb %d is larger than --volume-max-size-mb %d", size, max)
	}
	d.volumes = &api.Volumes{Store: d.st, Backing: b, DefaultSizeMB: size, MaxSizeMB: d.cfg.Volumes.MaxSizeMB}
	return nil
}
