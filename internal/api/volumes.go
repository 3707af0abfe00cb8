package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/volume"
)

// Volumes configures E2B's volume API (spec §9): the records, the storage
// on this host, and the size limit a create gets when it names none.
type Volumes struct {
	Store   store.VolumeStore
	Backing volume.Backing
	// DefaultSizeMB is a volume's size limit when the create body has no
	// sizeMB (an Airlock extension); MaxSizeMB the largest it may ask for
	// (0: no bound).
	DefaultSizeMB, MaxSizeMB int64
	// TokenTTL is how long a content API token lives (0: DefaultTokenTTL).
	TokenTTL time.Duration
	// Buckets enables bucket volumes (nil: a create with a bucket is
	// refused; volumebuckets.go).
	Buckets *BucketVolumes
}

// MinVolumeSizeMB is the smallest size a create may ask for: the loop
// backing's smallest image (volume.MinSize, an ext4 journal and its
// metadata), for every backing alike.
const MinVolumeSizeMB = 16

// DefaultTokenTTL is the life of a volume content token. The SDKs keep the
// token of a Volume object and never renew it, so it outlives E2B's hour.
const DefaultTokenTTL = 24 * time.Hour

// newVolumeBody is E2B's NewVolume plus Airlock's sizeMB.
type newVolumeBody struct {
	Name   string `json:"name"`
	SizeMB *int64 `json:"sizeMB,omitempty"`
	// Bucket makes a bucket volume (an Airlock extension).
	Bucket *volume.Bucket `json:"bucket,omitempty"`
}

// volumeJSON is E2B's Volume and, with Token, VolumeAndToken; SizeMB is
// Airlock's extension.
type volumeJSON struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Token    string `json:"token,omitempty"`
	SizeMB   int64  `json:"sizeMB"`
	// UsedBytes and MountedBy are Airlock's too (volumes_use.go).
	UsedBytes *int64   `json:"usedBytes,omitempty"`
	MountedBy []string `json:"mountedBy,omitempty"`
	// Bucket is a bucket volume's bucket, without its secret key and with
	// its access key id masked (volume.PublicBucket).
	Bucket *volume.Bucket `json:"bucket,omitempty"`
}

// volumeName is E2B's NewVolume.name pattern (at most 250 characters, its
// column's width).
var volumeName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,250}$`)

// volumeID is the shape of the ids volumes get (uuid v4, lower case).
var volumeID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func (a *api) volumeRoutes() {
	h := a.mux.HandleFunc
	h("POST /volumes", a.createVolume)
	h("GET /volumes", a.listVolumes)
	h("GET /volumes/{volumeID}", a.getVolume)
	h("DELETE /volumes/{volumeID}", a.deleteVolume)
	h("GET /volumecontent/{volumeID}/path", a.content(a.statPath))
	h("PATCH /volumecontent/{volumeID}/path", a.content(a.updatePath))
	h("DELETE /volumecontent/{volumeID}/path", a.content(a.removePath))
	h("GET /volumecontent/{volumeID}/dir", a.content(a.listDir))
	h("POST /volumecontent/{volumeID}/dir", a.content(a.makeDir))
	h("GET /volumecontent/{volumeID}/file", a.content(a.readFile))
	h("PUT /volumecontent/{volumeID}/file", a.content(a.writeFile))
}

// volumesOn answers 501 when the daemon serves no volumes.
func (a *api) volumesOn(w http.ResponseWriter) bool {
	if a.opts.Volumes == nil {
		msg := "volumes are not enabled on this daemon"
		if a.opts.NoVolumes != "" {
			msg = a.opts.NoVolumes
		}
		middleware.WriteError(w, http.StatusNotImplemented, msg)
		return false
	}
	return true
}

func (a *api) createVolume(w http.ResponseWriter, r *http.Request) {
	if !a.volumesOn(w) {
		return
	}
	var body newVolumeBody
	if !decodeBody(w, r, &body, false) {
		return
	}
	if !volumeName.MatchString(body.Name) {
		middleware.WriteError(w, http.StatusBadRequest, "Invalid volume name")
		return
	}
	vols := a.opts.Volumes
	sizeMB := vols.DefaultSizeMB
	id, bucket := newUUID(), ""
	if body.Bucket != nil {
		var ok bool
		if bucket, ok = a.bucketRecord(w, r, id, body.Bucket, body.SizeMB != nil); !ok {
			return
		}
		sizeMB = 0
	} else if body.SizeMB != nil {
		sizeMB = *body.SizeMB
		max := vols.MaxSizeMB
		if max <= 0 {
			max = 1 << 30
		}
		if sizeMB < MinVolumeSizeMB || sizeMB > max {
			middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("sizeMB must be between %d and %d", MinVolumeSizeMB, max))
			return
		}
	}
	v := &store.Volume{ID: id, Name: body.Name, SizeBytes: sizeMB << 20, CreatedAt: time.Now().UTC(), Bucket: bucket}
	if err := vols.Store.CreateVolume(r.Context(), v); errors.Is(err, store.ErrNameTaken) {
		middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("Volume with name '%s' already exists", body.Name))
		return
	} else if err != nil {
		a.fail(w, r, err)
		return
	}
	if err := vols.Backing.Create(r.Context(), v.ID, v.SizeBytes); err != nil {
		ctx := context.WithoutCancel(r.Context())
		if derr := vols.Store.DeleteVolume(ctx, v.ID); derr != nil {
			err = errors.Join(err, derr)
		}
		a.fail(w, r, fmt.Errorf("creating volume %s: %w", v.Name, err))
		return
	}
	a.log.Info("volume created", "volume", v.ID, "name", v.Name, "sizeMB", sizeMB)
	middleware.WriteJSON(w, http.StatusCreated, a.volumeAndToken(v))
}

func (a *api) volumeAndToken(v *store.Volume) volumeJSON {
	return volumeJSON{VolumeID: v.ID, Name: v.Name, SizeMB: v.SizeBytes >> 20, Token: a.volumeToken(v.ID, time.Now()), Bucket: volume.PublicBucket(v.Bucket)}
}

func (a *api) listVolumes(w http.ResponseWriter, r *http.Request) {
	if !a.volumesOn(w) {
		return
	}
	all, err := a.opts.Volumes.Store.ListVolumes(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := make([]volumeJSON, 0, len(all))
	for _, v := range all {
		out = append(out, volumeJSON{VolumeID: v.ID, Name: v.Name, SizeMB: v.SizeBytes >> 20, Bucket: volume.PublicBucket(v.Bucket)})
	}
	a.addUse(r.Context(), out)
	middleware.WriteJSON(w, http.StatusOK, out)
}

// pathVolume looks the path's volume up, answering 400 (not an id) or 404
// itself.
func (a *api) pathVolume(w http.ResponseWriter, r *http.Request) (*store.Volume, bool) {
	id := r.PathValue("volumeID")
	if !volumeID.MatchString(id) {
		middleware.WriteError(w, http.StatusBadRequest, "Invalid volume ID")
		return nil, false
	}
	v, err := a.opts.Volumes.Store.GetVolume(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		middleware.WriteError(w, http.StatusNotFound, "Volume not found")
		return nil, false
	} else if err != nil {
		a.fail(w, r, err)
		return nil, false
	}
	return v, true
}

func (a *api) getVolume(w http.ResponseWriter, r *http.Request) {
	if !a.volumesOn(w) {
		return
	}
	v, ok := a.pathVolume(w, r)
	if !ok {
		return
	}
	out := []volumeJSON{a.volumeAndToken(v)}
	a.addUse(r.Context(), out)
	middleware.WriteJSON(w, http.StatusOK, out[0])
}

// deleteVolume removes the record, then the data, whether or not running
// sandboxes mount the volume (as E2B does): their mount stays, empty, and
// nothing can be created in it (docs/DECISIONS.md).
func (a *api) deleteVolume(w http.ResponseWriter, r *http.Request) {
	if !a.volumesOn(w) {
		return
	}
	v, ok := a.pathVolume(w, r)
	if !ok {
		return
	}
	if err := a.opts.Volumes.Store.DeleteVolume(r.Context(), v.ID); errors.Is(err, store.ErrNotFound) {
		middleware.WriteError(w, http.StatusNotFound, "Volume not found")
		return
	} else if err != nil {
		a.fail(w, r, err)
		return
	}
	var mounted []string
	if a.m != nil {
		for _, sb := range a.m.List() {
			for _, m := range sb.VolumeMounts {
				if m.VolumeID == v.ID {
					mounted = append(mounted, sb.ID)
				}
			}
		}
	}
	// The record is gone: the data goes even if the client hangs up.
	if err := a.opts.Volumes.Backing.Delete(context.WithoutCancel(r.Context()), v.ID); err != nil {
		a.log.Error("volume record deleted, its data not (remove it by hand)", "volume", v.ID, "err", err)
	}
	a.log.Info("volume deleted", "volume", v.ID, "name", v.Name, "mountedBy", mounted)
	w.WriteHeader(http.StatusNoContent)
}

// Volume content tokens: a JWT (HS256) naming one volume, signed with a
// key derived from the daemon's API key (so every api instance of a
// cluster checks any instance's tokens, and a new API key revokes them).

type tokenClaims struct {
	Issuer    string `json:"iss"`
	Subject   string `json:"sub"`
	VolumeID  string `json:"volid"`
	IssuedAt  int64  `json:"iat"`
	NotBefore int64  `json:"nbf"`
	Expires   int64  `json:"exp"`
	ID        string `json:"jti"`
}

const tokenHeader = `{"alg":"HS256","typ":"JWT"}`

var b64 = base64.RawURLEncoding

func (a *api) tokenKey() []byte {
	mac := hmac.New(sha256.New, []byte(a.opts.APIKey))
	mac.Write([]byte("airlock volume content token v1"))
	return mac.Sum(nil)
}

func (a *api) sign(msg string) []byte {
	mac := hmac.New(sha256.New, a.tokenKey())
	mac.Write([]byte(msg))
	return mac.Sum(nil)
}

// volumeToken returns a content token for volume id, issued at now.
func (a *api) volumeToken(id string, now time.Time) string {
	ttl := a.opts.Volumes.TokenTTL
	if ttl <= 0 {
		ttl = DefaultTokenTTL
	}
	c := tokenClaims{Issuer: "airlock", Subject: "volume", VolumeID: id, IssuedAt: now.Unix(), NotBefore: now.Unix() - 60,
		Expires: now.Add(ttl).Unix(), ID: newUUID()}
	payload, _ := json.Marshal(c)
	msg := b64.EncodeToString([]byte(tokenHeader)) + "." + b64.EncodeToString(payload)
	return msg + "." + b64.EncodeToString(a.sign(msg))
}

// checkVolumeToken reports why tok does not grant volume id at now ("" if
// it does).
func (a *api) checkVolumeToken(tok, id string, now time.Time) string {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "malformed token"
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil || !hmac.Equal(sig, a.sign(parts[0]+"."+parts[1])) {
		return "invalid token signature"
	}
	raw, err := b64.DecodeString(parts[1])
	if err != nil {
		return "malformed token"
	}
	var c tokenClaims
	if err := json.Unmarshal(raw, &c); err != nil {
		return "malformed token"
	}
	switch {
	case c.VolumeID != id:
		return "the token is for another volume"
	case now.Unix() >= c.Expires:
		return "the token has expired (get a new one with GET /volumes/{volumeID})"
	case now.Unix() < c.NotBefore:
		return "the token is not valid yet"
	}
	return ""
}
