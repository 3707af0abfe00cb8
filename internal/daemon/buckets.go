package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/secretbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/volume"
)

// DefaultSecretsKeyFile is --secrets-key-file's default, under the data
// dir (generated, 0600, at first start).
const DefaultSecretsKeyFile = "secrets.key"

// openSecrets opens the key that seals credentials in the store
// (--secrets-key-file; a missing default one is generated), once: bucket
// volumes and /secrets share it.
func (d *daemon) openSecrets() (*secretbox.Box, error) {
	if d.secretBox != nil {
		return d.secretBox, nil
	}
	box, err := loadSecretsKey(d.cfg.SecretsKeyFile, d.dataDir)
	if err != nil {
		return nil, err
	}
	d.secretBox = box
	return box, nil
}

// loadSecretsKey opens --secrets-key-file (flag), else the default one
// under dataDir, generated when missing.
func loadSecretsKey(flag, dataDir string) (*secretbox.Box, error) {
	path, create := flag, false
	if path == "" {
		path, create = filepath.Join(dataDir, DefaultSecretsKeyFile), true
	}
	box, err := secretbox.LoadOrCreate(path, create)
	if err != nil {
		return nil, fmt.Errorf("--secrets-key-file: %w", err)
	}
	return box, nil
}

// openBuckets wraps the node's volume Backing in volume.Buckets (bucket
// volumes mounted with s3fs under <data-dir>/buckets) and returns what
// the volume API needs to create them. Without volumes, or without s3fs
// (a warning), bucket volumes are off: their creates answer 400.
func (d *daemon) openBuckets(inner volume.Backing) (volume.Backing, *api.BucketVolumes, error) {
	if inner == nil {
		return nil, nil, nil
	}
	box, err := d.openSecrets()
	if err != nil {
		return nil, nil, err
	}
	dialer := &volume.BucketDialer{AllowPrivate: d.cfg.Volumes.BucketAllowPrivate}
	lookup := func(ctx context.Context, id string) (*volume.Bucket, error) {
		v, err := d.st.GetVolume(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("volume %s: %w", id, volume.ErrNotFound)
		} else if err != nil {
			return nil, err
		}
		if v.Bucket == "" {
			return nil, nil
		}
		return volume.DecodeBucket(box, id, v.Bucket)
	}
	b, err := volume.NewBuckets(filepath.Join(d.dataDir, "buckets"), inner, lookup, dialer, d.log.With("component", "buckets"))
	if err != nil {
		d.log.Warn("no bucket volumes on this node", "err", err)
		return inner, nil, nil
	}
	d.buckets = b
	return b, &api.BucketVolumes{Box: box, Dialer: dialer}, nil
}
