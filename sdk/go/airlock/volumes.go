package airlock

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Volumes (E2B's Volume, spec §9): named persistent directories that live
// apart from sandboxes, that sandboxes mount at create (SandboxOptions.
// VolumeMounts) and whose files the content API reads and writes without a
// sandbox. The control calls (create, get, list, destroy) carry the API
// key; the content calls carry the volume's own token, as E2B's SDKs do.

// BucketConfig backs a volume with an S3-compatible bucket (an Airlock
// extension, sent as the create body's "bucket"). The daemon mounts the
// bucket on its host; the credentials never enter a sandbox.
type BucketConfig struct {
	Endpoint        string `json:"endpoint,omitempty"`
	Bucket          string `json:"bucket"`
	Prefix          string `json:"prefix,omitempty"`
	Region          string `json:"region,omitempty"`
	AccessKeyID     string `json:"accessKeyId,omitempty"`
	SecretAccessKey string `json:"secretAccessKey,omitempty"`
	PathStyle       bool   `json:"pathStyle,omitempty"`
	ReadOnly        bool   `json:"readOnly,omitempty"`
}

// NewVolume is the body of POST /volumes: E2B's NewVolume (name) plus
// Airlock's sizeMB and bucket.
type NewVolume struct {
	Name string `json:"name"`
	// SizeMB is the volume's size limit (0: the daemon's
	// --volume-size-default).
	SizeMB int64         `json:"sizeMB,omitempty"`
	Bucket *BucketConfig `json:"bucket,omitempty"`
}

// VolumeInfo is E2B's Volume / VolumeAndToken with Airlock's extensions.
type VolumeInfo struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	// Token opens the content API (GET /volumes/{id} and create only).
	Token  string `json:"token,omitempty"`
	Domain string `json:"domain,omitempty"`
	// SizeMB is the size limit; UsedBytes what the files take (nil when
	// the daemon cannot tell); MountedBy the ids of the sandboxes that
	// mount the volume.
	SizeMB    int64    `json:"sizeMB"`
	UsedBytes *int64   `json:"usedBytes,omitempty"`
	MountedBy []string `json:"mountedBy,omitempty"`
	// Bucket describes a bucket volume (never with its secret).
	Bucket json.RawMessage `json:"bucket,omitempty"`
}

// Volume is a handle on one volume: its identity and the token of its
// content API.
type Volume struct {
	VolumeInfo
	c *Client
}

// VolumeMount mounts volume Name at Path in a new sandbox (E2B's
// SandboxVolumeMount). ReadOnly is Airlock's extension: the sandbox sees
// the volume read-only (writes fail with EROFS).
type VolumeMount struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// VolumeEntry is E2B's VolumeEntryStat.
type VolumeEntry struct {
	Name   string    `json:"name"`
	Type   string    `json:"type"` // "file", "directory", "symlink" or "unknown"
	Path   string    `json:"path"`
	Size   int64     `json:"size"`
	Mode   uint32    `json:"mode"`
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	Atime  time.Time `json:"atime"`
	Mtime  time.Time `json:"mtime"`
	Ctime  time.Time `json:"ctime"`
	Target string    `json:"target,omitempty"`
}

// IsDir reports whether the entry is a directory.
func (e VolumeEntry) IsDir() bool { return e.Type == "directory" }

// VolumeWriteOptions are the owner, mode and force of MakeDir and
// WriteFile. Force: WriteFile overwrites and creates parents; MakeDir
// creates parents and accepts an existing directory.
type VolumeWriteOptions struct {
	UID, GID, Mode *uint32
	Force          bool
}

// VolumeMetadata is UpdateMetadata's change (nil fields stay).
type VolumeMetadata struct {
	UID  *uint32 `json:"uid,omitempty"`
	GID  *uint32 `json:"gid,omitempty"`
	Mode *uint32 `json:"mode,omitempty"`
}

var uuidShape = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// CreateVolume creates a volume (POST /volumes) and returns its handle.
func (c *Client) CreateVolume(ctx context.Context, v NewVolume) (*Volume, error) {
	var info VolumeInfo
	if _, err := c.doJSON(ctx, http.MethodPost, "/volumes", nil, v, &info); err != nil {
		return nil, fmt.Errorf("creating volume %s: %w", v.Name, err)
	}
	return &Volume{VolumeInfo: info, c: c}, nil
}

// GetVolume returns volume id with a fresh content token (GET
// /volumes/{id}).
func (c *Client) GetVolume(ctx context.Context, id string) (VolumeInfo, error) {
	var info VolumeInfo
	if _, err := c.doJSON(ctx, http.MethodGet, "/volumes/"+url.PathEscape(id), nil, nil, &info); err != nil {
		return VolumeInfo{}, fmt.Errorf("getting volume %s: %w", id, err)
	}
	return info, nil
}

// ConnectVolume returns a handle on an existing volume named by its id or
// its name (an error that IsNotFound when there is none).
func (c *Client) ConnectVolume(ctx context.Context, idOrName string) (*Volume, error) {
	id, err := c.ResolveVolume(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	info, err := c.GetVolume(ctx, id)
	if err != nil {
		return nil, err
	}
	return &Volume{VolumeInfo: info, c: c}, nil
}

// ResolveVolume returns the id of the volume named by idOrName (an id is
// returned as it is).
func (c *Client) ResolveVolume(ctx context.Context, idOrName string) (string, error) {
	if uuidShape.MatchString(idOrName) {
		return idOrName, nil
	}
	all, err := c.ListVolumes(ctx)
	if err != nil {
		return "", err
	}
	for _, v := range all {
		if v.Name == idOrName {
			return v.VolumeID, nil
		}
	}
	return "", fmt.Errorf("volume %s: %w", idOrName, &APIError{Status: http.StatusNotFound, Message: "Volume not found"})
}

// ListVolumes lists every volume (GET /volumes; no tokens).
func (c *Client) ListVolumes(ctx context.Context) ([]VolumeInfo, error) {
	var out []VolumeInfo
	if _, err := c.doJSON(ctx, http.MethodGet, "/volumes", nil, nil, &out); err != nil {
		return nil, fmt.Errorf("listing volumes: %w", err)
	}
	return out, nil
}

// DestroyVolume deletes volume id and its data, reporting false when there
// was no such volume (as E2B's SDKs do). Sandboxes that mount it keep an
// empty mount.
func (c *Client) DestroyVolume(ctx context.Context, id string) (bool, error) {
	_, err := c.doJSON(ctx, http.MethodDelete, "/volumes/"+url.PathEscape(id), nil, nil, nil)
	if IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("deleting volume %s: %w", id, err)
	}
	return true, nil
}

// Destroy deletes the volume (see DestroyVolume).
func (v *Volume) Destroy(ctx context.Context) (bool, error) {
	return v.c.DestroyVolume(ctx, v.VolumeID)
}

// contentBase is where the content API is: VolumeURL, else
// $E2B_VOLUME_API_URL, else the control plane (the daemon serves both).
func (c *Client) contentBase() string {
	return strings.TrimRight(firstNonEmpty(c.VolumeURL, os.Getenv("E2B_VOLUME_API_URL"), c.APIURL), "/")
}

// content sends one content API request for path with the volume's token.
func (v *Volume) content(ctx context.Context, method, op, path string, q url.Values, body io.Reader) (*http.Response, error) {
	if q == nil {
		q = url.Values{}
	}
	q.Set("path", path)
	u := v.c.contentBase() + "/volumecontent/" + url.PathEscape(v.VolumeID) + "/" + op + "?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+v.Token)
	if v.c.UserAgent != "" {
		req.Header.Set("User-Agent", v.c.UserAgent)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := v.c.HTTP.Do(req)
	if err != nil {
		return nil, v.c.transportError(err)
	}
	if err := checkResponse(resp); err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("volume %s: %s %s: %w", v.Name, method, path, err)
	}
	return resp, nil
}

// contentJSON is content decoding a JSON answer into out.
func (v *Volume) contentJSON(ctx context.Context, method, op, path string, q url.Values, body io.Reader, out any) error {
	resp, err := v.content(ctx, method, op, path, q, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("volume %s: decoding %s %s: %w", v.Name, method, path, err)
	}
	return nil
}

func (o VolumeWriteOptions) query() url.Values {
	q := url.Values{}
	for name, p := range map[string]*uint32{"uid": o.UID, "gid": o.GID, "mode": o.Mode} {
		if p != nil {
			q.Set(name, strconv.FormatUint(uint64(*p), 10))
		}
	}
	if o.Force {
		q.Set("force", "true")
	}
	return q
}

// List lists directory path (depth 0 or 1: its entries; more: their
// descendants to that depth).
func (v *Volume) List(ctx context.Context, path string, depth int) ([]VolumeEntry, error) {
	q := url.Values{}
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var out []VolumeEntry
	return out, v.contentJSON(ctx, http.MethodGet, "dir", path, q, nil, &out)
}

// MakeDir creates directory path.
func (v *Volume) MakeDir(ctx context.Context, path string, o VolumeWriteOptions) (VolumeEntry, error) {
	var e VolumeEntry
	return e, v.contentJSON(ctx, http.MethodPost, "dir", path, o.query(), nil, &e)
}

// GetInfo stats path (an error that IsNotFound when it does not exist).
func (v *Volume) GetInfo(ctx context.Context, path string) (VolumeEntry, error) {
	var e VolumeEntry
	return e, v.contentJSON(ctx, http.MethodGet, "path", path, nil, nil, &e)
}

// Exists reports whether path exists.
func (v *Volume) Exists(ctx context.Context, path string) (bool, error) {
	_, err := v.GetInfo(ctx, path)
	if IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// UpdateMetadata changes the owner or mode of path.
func (v *Volume) UpdateMetadata(ctx context.Context, path string, m VolumeMetadata) (VolumeEntry, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return VolumeEntry{}, fmt.Errorf("encoding metadata: %w", err)
	}
	var e VolumeEntry
	return e, v.contentJSON(ctx, http.MethodPatch, "path", path, nil, bytes.NewReader(b), &e)
}

// OpenFile streams file path; the caller closes the reader.
func (v *Volume) OpenFile(ctx context.Context, path string) (io.ReadCloser, error) {
	resp, err := v.content(ctx, http.MethodGet, "file", path, nil, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// ReadFile returns the content of file path.
func (v *Volume) ReadFile(ctx context.Context, path string) ([]byte, error) {
	r, err := v.OpenFile(ctx, path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("volume %s: reading %s: %w", v.Name, path, err)
	}
	return b, nil
}

// WriteFile writes r (streamed) to file path. Without o.Force an existing
// file or a missing parent is refused (409, 404).
func (v *Volume) WriteFile(ctx context.Context, path string, r io.Reader, o VolumeWriteOptions) (VolumeEntry, error) {
	if r == nil {
		r = http.NoBody
	}
	var e VolumeEntry
	return e, v.contentJSON(ctx, http.MethodPut, "file", path, o.query(), r, &e)
}

// Remove deletes path (a directory with everything in it).
func (v *Volume) Remove(ctx context.Context, path string) error {
	return v.contentJSON(ctx, http.MethodDelete, "path", path, nil, nil, nil)
}

// mountsJSON encodes VolumeMounts for a create body.
func mountsJSON(ms []VolumeMount) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(ms))
	for _, m := range ms {
		b, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("encoding volume mount: %w", err)
		}
		out = append(out, b)
	}
	return out, nil
}

// ParseVolumeMounts reads a sandbox's volumeMounts as the daemon lists
// them (ListedSandbox.VolumeMounts).
func ParseVolumeMounts(raw []json.RawMessage) ([]VolumeMount, error) {
	out := make([]VolumeMount, 0, len(raw))
	for _, r := range raw {
		var m VolumeMount
		if err := json.Unmarshal(r, &m); err != nil {
			return nil, fmt.Errorf("decoding volume mount %s: %w", r, err)
		}
		out = append(out, m)
	}
	return out, nil
}
