package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/secretbox"
	"github.com/airlock-sandbox/airlock/internal/volume"
)

// BucketVolumes enables bucket volumes (an Airlock extension: `bucket` in
// POST /volumes; internal/volume/bucket.go) on the volume API.
type BucketVolumes struct {
	// Box seals the credentials in the store (the daemon's secrets key).
	Box *secretbox.Box
	// Dialer reaches bucket endpoints (refusing private addresses unless
	// --volume-bucket-allow-private).
	Dialer *volume.BucketDialer
	// CheckTimeout bounds the create's check (0: volume's default).
	CheckTimeout time.Duration
}

// bucketRecord checks a create's bucket (its shape, then a listing with
// its credentials) and returns what the store keeps for volume id, or
// answers 400 itself ("" and false).
func (a *api) bucketRecord(w http.ResponseWriter, r *http.Request, id string, b *volume.Bucket, sizeGiven bool) (string, bool) {
	bv := a.opts.Volumes.Buckets
	if bv == nil || bv.Box == nil {
		middleware.WriteError(w, http.StatusBadRequest, "bucket volumes are not enabled on this daemon (it needs s3fs and volume storage)")
		return "", false
	}
	if sizeGiven {
		middleware.WriteError(w, http.StatusBadRequest, "sizeMB does not apply to a bucket volume (the bucket's own quota, if any, applies)")
		return "", false
	}
	if err := b.Normalize(); err != nil {
		middleware.WriteError(w, http.StatusBadRequest, "invalid bucket: "+err.Error())
		return "", false
	}
	d := bv.Dialer
	if d == nil {
		d = &volume.BucketDialer{}
	}
	if err := volume.CheckBucket(r.Context(), b, d, bv.CheckTimeout); err != nil {
		var be *volume.BucketError
		if errors.As(err, &be) {
			middleware.WriteError(w, http.StatusBadRequest, "bucket check failed: "+be.Msg)
			return "", false
		}
		a.fail(w, r, fmt.Errorf("checking bucket %s: %w", b.Bucket, err))
		return "", false
	}
	rec, err := volume.EncodeBucket(bv.Box, id, b)
	if err != nil {
		a.fail(w, r, err)
		return "", false
	}
	return rec, true
}
