// Package volume is Airlock's persistent storage for sandboxes: E2B's
// volumes (spec §9), a directory that outlives any sandbox, that several
// sandboxes may mount at once, and whose files the content API reads and
// writes without a sandbox.
//
// Two halves meet here. The control and content API (internal/api) keep
// each volume's record in the store and name it by id; a Backing keeps its
// data on the node and gives the host directory that the runtimes mount
// into a sandbox (gVisor: a bind mount served by the gofer; microVM: see
// internal/runtime/microvm) and that the content API serves.
//
// Backings: Loop (loop_linux.go, `--volume-backing loop`/`auto`) keeps
// each volume in a sparse ext4 image whose size is its limit; dir.go keeps
// plain directories (shared filesystems). The daemon picks one
// (internal/daemon/volumes.go); the sandbox manager mounts Dir into
// sandboxes (internal/sandbox/volumes.go). Buckets
// (bucketmount_linux.go; bucket.go) wraps it: a bucket volume (an Airlock
// extension) is an s3fs mount of an S3 bucket on the host, its
// credentials sealed in the store and never in a sandbox.
package volume

import (
	"context"
	"errors"
)

// Mount is one volume mounted into a sandbox: E2B's `volumeMounts` entry
// ({name, path}) resolved to the volume's id.
type Mount struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	// Path is the absolute path in the sandbox.
	Path     string `json:"path"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// Backing keeps volumes' data on a node.
type Backing interface {
	// Create makes the storage of volume id, holding at most sizeBytes.
	Create(ctx context.Context, id string, sizeBytes int64) error
	// Dir is the host directory that holds volume id's files, ready to be
	// mounted or served (ErrNotFound when the volume has no storage here).
	Dir(ctx context.Context, id string) (string, error)
	// Usage reports the bytes used and the size limit of volume id.
	Usage(ctx context.Context, id string) (used, size int64, err error)
	// Delete removes volume id's storage and data.
	Delete(ctx context.Context, id string) error
}

// ErrNotFound is returned for a volume that has no storage.
var ErrNotFound = errors.New("volume not found")
