package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/volume"
)

// Volumes are the --volume-* flags: where the node keeps volumes' data.
type Volumes struct {
	// Backing is --volume-backing: "loop" (a sparse ext4 image per
	// volume, its size the limit; internal/volume.Loop), "auto" (the
	// default: loop where the host has loop devices and mkfs.ext4, else
	// none, with a warning), "dir" (a plain directory per volume, its
	// size a limit of the content API only; volume.DirBacking, which
	// --volume-root implies) or "none" (no volumes on this node; creates
	// with volumeMounts answer 400, the volume API 501). A --role node
	// daemon keeps volumes only on --volume-root.
	Backing string
	// DefaultSizeMB is --volume-size-default: a volume's size in MiB when
	// its create names none.
	DefaultSizeMB int
	// MaxSizeMB is --volume-size-max: the largest sizeMB a volume create
	// may ask for.
	MaxSizeMB int
	// Root is --volume-root: a directory on a filesystem every node of a
	// cluster mounts (NFS, CephFS, EFS, a ReadWriteMany volume), which
	// must exist; volumes are directories under it (the dir backing). A
	// --role node daemon keeps volumes only there: without it the node
	// has none, and says so (cluster.NoVolumeRoot).
	Root string
	// BucketAllowPrivate is --volume-bucket-allow-private: bucket volumes
	// may name endpoints on loopback, private and link-local addresses
	// (buckets.go).
	BucketAllowPrivate bool
}

// DefaultVolumeSizeMB is --volume-size-default's default.
const DefaultVolumeSizeMB = 5120

// DefaultVolumeMaxSizeMB is --volume-size-max's default (1 TiB).
const DefaultVolumeMaxSizeMB = 1 << 20

// openVolumes opens the Backing that --volume-backing selects (the one
// place it is chosen), under <data-dir>/volumes.
func (d *daemon) openVolumes() (volume.Backing, error) {
	if d.cfg.Volumes.Root != "" || d.role.node {
		return d.openSharedVolumes()
	}
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

// openSharedVolumes opens the dir backing on --volume-root, the shared
// filesystem of a cluster's nodes; on a --role node daemon without one,
// no volumes (never storage of its own, which the other nodes could not
// see: a create with volumeMounts is refused with cluster.NoVolumeRoot).
func (d *daemon) openSharedVolumes() (volume.Backing, error) {
	root, kind := d.cfg.Volumes.Root, d.cfg.Volumes.Backing
	if root == "" { // a node without the shared root
		switch kind {
		case "", "auto", "none":
			d.log.Info("no volumes on this node: in a cluster they need --volume-root, a filesystem the nodes share")
			return nil, nil
		}
		return nil, fmt.Errorf("--volume-backing %s keeps volumes on this node alone: a cluster node needs --volume-root, a filesystem every node shares", kind)
	}
	switch kind {
	case "", "auto", "dir":
	default:
		return nil, fmt.Errorf("--volume-root keeps volumes as directories on a shared filesystem: it goes with --volume-backing dir or auto, not %s", kind)
	}
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("--volume-root %q: want an absolute path", root)
	}
	// The root is the operator's mount: it must be there (a missing
	// mount must not become a local directory no other node sees).
	info, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("--volume-root: %w (mount the shared filesystem there first)", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("--volume-root %s: not a directory", root)
	}
	probe, err := os.CreateTemp(root, ".airlock-probe-*")
	if err != nil {
		return nil, fmt.Errorf("--volume-root %s: not writable: %w", root, err)
	}
	if err := errors.Join(probe.Close(), os.Remove(probe.Name())); err != nil {
		return nil, fmt.Errorf("--volume-root %s: %w", root, err)
	}
	b, err := volume.NewDirBacking(root)
	if err != nil {
		return nil, fmt.Errorf("--volume-root: %w", err)
	}
	d.log.Info("volumes on a shared root", "root", root)
	return b, nil
}

// noVolumes is why a daemon without volumes has none, for the API's
// answers ("" when it says nothing more than "not enabled").
func (d *daemon) noVolumes() string {
	if d.volumes == nil && d.role.node {
		return cluster.NoVolumeRoot
	}
	return ""
}

// nodeLabels are the labels a node's heartbeat carries: --node-labels and,
// with --volume-root, cluster.LabelVolumes.
func (d *daemon) nodeLabels() []string {
	ls := d.role.labels
	if d.cfg.Volumes.Root != "" && !slices.Contains(ls, cluster.LabelVolumes) {
		ls = append(slices.Clone(ls), cluster.LabelVolumes)
	}
	return ls
}
