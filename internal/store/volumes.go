package store

import (
	"context"
	"errors"
	"time"
)

// ErrNameTaken is returned by VolumeStore.CreateVolume when a volume with
// that name exists already.
var ErrNameTaken = errors.New("store: name taken")

// Volume is the record of one E2B volume (internal/volume): its data lives
// in a volume.Backing under its ID.
type Volume struct {
	ID        string // uuid
	Name      string // unique among the daemon's (the API key's) volumes
	SizeBytes int64  // the size limit (an Airlock extension)
	CreatedAt time.Time
	// Bucket is, for a bucket volume (an Airlock extension), its bucket's
	// settings with the credentials sealed, opaque to the store
	// (volume.EncodeBucket); "" for a volume the nodes' Backing keeps.
	Bucket string
}

// VolumeStore is implemented by stores that keep volumes. Volumes belong to
// no node: in a cluster every node sees every volume.
type VolumeStore interface {
	// CreateVolume inserts v; ErrNameTaken when its name is used.
	CreateVolume(ctx context.Context, v *Volume) error
	// GetVolume returns the volume with id; ErrNotFound when none.
	GetVolume(ctx context.Context, id string) (*Volume, error)
	// GetVolumeByName returns the volume named name; ErrNotFound when none.
	GetVolumeByName(ctx context.Context, name string) (*Volume, error)
	// ListVolumes returns every volume, oldest first (CreatedAt, ID).
	ListVolumes(ctx context.Context) ([]*Volume, error)
	// DeleteVolume removes the volume with id; ErrNotFound when none.
	DeleteVolume(ctx context.Context, id string) error
}
