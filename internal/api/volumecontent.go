package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/volume"
)

// The volume content API (spec §9.3): file operations on a volume without
// a sandbox, authorised by the volume's token (Authorization: Bearer) or
// the API key. Its error body's code is a string.

// contentError is the content API's error body.
type contentError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeContentError(w http.ResponseWriter, status int, code, msg string) {
	middleware.WriteJSON(w, status, contentError{Code: code, Message: msg})
}

// isVolumeContent reports whether r is for the content API, which checks
// its own credentials.
func isVolumeContent(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/volumecontent/") }

// isVolumeUpload reports whether r is a content API upload: its body is
// bounded by the volume's free space, not by maxBodyBytes.
func isVolumeUpload(r *http.Request) bool {
	return r.Method == http.MethodPut && isVolumeContent(r) && strings.HasSuffix(r.URL.Path, "/file")
}

// volumeRequest is one content API request's volume, opened.
type volumeRequest struct {
	vol   *store.Volume
	files *volume.Files
	path  string // the query's path
}

// content authorises a content API request, opens its volume and calls h.
func (a *api) content(h func(http.ResponseWriter, *http.Request, *volumeRequest)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a.opts.Volumes == nil {
			msg := "volumes are not enabled on this daemon"
			if a.opts.NoVolumes != "" {
				msg = a.opts.NoVolumes
			}
			writeContentError(w, http.StatusNotImplemented, "not_enabled", msg)
			return
		}
		id := r.PathValue("volumeID")
		if !middleware.Key(a.opts.APIKey).Authorized(r) && !(a.opts.Trusted != nil && a.opts.Trusted(r)) {
			tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || tok == "" {
				writeContentError(w, http.StatusUnauthorized, "unauthorized", "a volume token (Authorization: Bearer) or the API key is required")
				return
			}
			if why := a.checkVolumeToken(tok, id, time.Now()); why != "" {
				writeContentError(w, http.StatusUnauthorized, "unauthorized", why)
				return
			}
		}
		if !volumeID.MatchString(id) {
			writeContentError(w, http.StatusBadRequest, "invalid_volume_id", "Invalid volume ID")
			return
		}
		v, err := a.opts.Volumes.Store.GetVolume(r.Context(), id)
		if errors.Is(err, store.ErrNotFound) {
			writeContentError(w, http.StatusNotFound, "volume_not_found", "Volume not found")
			return
		} else if err != nil {
			a.contentFail(w, r, err)
			return
		}
		dir, err := a.opts.Volumes.Backing.Dir(r.Context(), v.ID)
		if errors.Is(err, volume.ErrNotFound) {
			writeContentError(w, http.StatusNotFound, "volume_not_found", "the volume has no storage on this host")
			return
		} else if err != nil {
			a.contentFail(w, r, err)
			return
		}
		p := r.URL.Query().Get("path")
		if p == "" {
			writeContentError(w, http.StatusBadRequest, "invalid_path", "the path query parameter is required")
			return
		}
		files, err := volume.OpenFiles(dir)
		if err != nil {
			a.contentFail(w, r, err)
			return
		}
		defer files.Close()
		h(w, r, &volumeRequest{vol: v, files: files, path: p})
	}
}

// contentFail answers err with its status and string code.
func (a *api) contentFail(w http.ResponseWriter, r *http.Request, err error) {
	type mapping struct {
		target error
		status int
		code   string
	}
	for _, m := range []mapping{
		{volume.ErrInvalidPath, http.StatusBadRequest, "invalid_path"},
		{volume.ErrEscapes, http.StatusBadRequest, "invalid_path"},
		{volume.ErrFull, http.StatusInsufficientStorage, "insufficient_storage"},
		{fs.ErrExist, http.StatusConflict, "already_exists"},
		{fs.ErrNotExist, http.StatusNotFound, "path_not_found"},
		{volume.ErrIsDir, http.StatusBadRequest, "is_directory"},
		{volume.ErrNotDir, http.StatusBadRequest, "not_directory"},
	} {
		if errors.Is(err, m.target) {
			writeContentError(w, m.status, m.code, err.Error())
			return
		}
	}
	if ue, ok := sandbox.AsUserError(err); ok { // the host's disk reserve
		writeContentError(w, ue.Code, "insufficient_storage", ue.Msg)
		return
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		writeContentError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("request body larger than %d bytes", mbe.Limit))
		return
	}
	a.log.Error("volume content request failed", "method", r.Method, "path", r.URL.Path, "request", middleware.RequestIDFrom(r.Context()), "err", err)
	writeContentError(w, http.StatusInternalServerError, "internal", "internal server error (see the daemon log)")
}

// queryUint32 reads query parameter name as a uint32 (nil when absent).
func queryUint32(r *http.Request, name string) (*uint32, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return nil, nil
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("%s: %q is not an unsigned 32-bit integer", name, s)
	}
	v := uint32(n)
	return &v, nil
}

// owner reads the uid, gid and mode query parameters and force.
func owner(r *http.Request) (volume.Owner, bool, error) {
	var o volume.Owner
	var err error
	if o.UID, err = queryUint32(r, "uid"); err != nil {
		return o, false, err
	}
	if o.GID, err = queryUint32(r, "gid"); err != nil {
		return o, false, err
	}
	if o.Mode, err = queryUint32(r, "mode"); err != nil {
		return o, false, err
	}
	if o.Mode != nil && *o.Mode > 0o7777 {
		return o, false, fmt.Errorf("mode: %#o has bits beyond 07777", *o.Mode)
	}
	force := false
	if s := r.URL.Query().Get("force"); s != "" {
		if force, err = strconv.ParseBool(s); err != nil {
			return o, false, fmt.Errorf("force: %q is not a boolean", s)
		}
	}
	return o, force, nil
}

func (a *api) statPath(w http.ResponseWriter, r *http.Request, vr *volumeRequest) {
	e, err := vr.files.Stat(vr.path)
	if err != nil {
		a.contentFail(w, r, err)
		return
	}
	middleware.WriteJSON(w, http.StatusOK, e)
}

func (a *api) updatePath(w http.ResponseWriter, r *http.Request, vr *volumeRequest) {
	var body struct {
		UID  *uint32 `json:"uid"`
		GID  *uint32 `json:"gid"`
		Mode *uint32 `json:"mode"`
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		a.contentFail(w, r, err)
		return
	}
	if len(strings.TrimSpace(string(data))) > 0 {
		if err := json.Unmarshal(data, &body); err != nil {
			writeContentError(w, http.StatusBadRequest, "invalid_body", "invalid JSON body: "+err.Error())
			return
		}
	}
	if body.Mode != nil && *body.Mode > 0o7777 {
		writeContentError(w, http.StatusBadRequest, "invalid_body", fmt.Sprintf("mode: %#o has bits beyond 07777", *body.Mode))
		return
	}
	e, err := vr.files.SetMetadata(vr.path, volume.Owner{UID: body.UID, GID: body.GID, Mode: body.Mode})
	if err != nil {
		a.contentFail(w, r, err)
		return
	}
	middleware.WriteJSON(w, http.StatusOK, e)
}

func (a *api) removePath(w http.ResponseWriter, r *http.Request, vr *volumeRequest) {
	if err := vr.files.Remove(vr.path); err != nil {
		a.contentFail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// maxListDepth bounds a listing's depth.
const maxListDepth = 64

func (a *api) listDir(w http.ResponseWriter, r *http.Request, vr *volumeRequest) {
	depth := 1
	if d, err := queryUint32(r, "depth"); err != nil {
		writeContentError(w, http.StatusBadRequest, "invalid_query", err.Error())
		return
	} else if d != nil {
		if *d > maxListDepth {
			writeContentError(w, http.StatusBadRequest, "invalid_query", fmt.Sprintf("depth: at most %d", maxListDepth))
			return
		}
		depth = int(*d)
	}
	entries, err := vr.files.List(vr.path, depth)
	if err != nil {
		a.contentFail(w, r, err)
		return
	}
	if entries == nil {
		entries = []volume.Entry{}
	}
	middleware.WriteJSON(w, http.StatusOK, entries)
}

func (a *api) makeDir(w http.ResponseWriter, r *http.Request, vr *volumeRequest) {
	o, force, err := owner(r)
	if err != nil {
		writeContentError(w, http.StatusBadRequest, "invalid_query", err.Error())
		return
	}
	e, err := vr.files.MakeDir(vr.path, o, force)
	if err != nil {
		a.contentFail(w, r, err)
		return
	}
	middleware.WriteJSON(w, http.StatusCreated, e)
}

func (a *api) readFile(w http.ResponseWriter, r *http.Request, vr *volumeRequest) {
	f, e, err := vr.files.Open(vr.path)
	if err != nil {
		a.contentFail(w, r, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", e.Mtime, f) // streams; Range and If-Modified-Since work
}

// writeFile streams the body into the volume, refusing what would take it
// past its size limit (507, before reading when Content-Length says so)
// and, like sandbox uploads, writes when the host's disk is at its reserve.
func (a *api) writeFile(w http.ResponseWriter, r *http.Request, vr *volumeRequest) {
	o, force, err := owner(r)
	if err != nil {
		writeContentError(w, http.StatusBadRequest, "invalid_query", err.Error())
		return
	}
	if a.m != nil {
		if err := a.m.CheckHostDisk(); err != nil {
			a.contentFail(w, r, err)
			return
		}
	}
	if up, ok := a.opts.Volumes.Backing.(volume.Uploader); ok {
		a.writeAccounted(w, r, vr, up, o, force)
		return
	}
	used, size, err := a.opts.Volumes.Backing.Usage(r.Context(), vr.vol.ID)
	if err != nil {
		a.contentFail(w, r, err)
		return
	}
	left := size - used
	if force { // an overwrite frees the old file's space
		if old, err := vr.files.Stat(vr.path); err == nil && old.Type == "file" {
			left += old.Size
		}
	}
	if left < 0 {
		left = 0
	}
	if r.ContentLength > left {
		writeContentError(w, http.StatusInsufficientStorage, "insufficient_storage",
			fmt.Sprintf("%s: %d bytes do not fit in the volume (%d of its %d bytes are free)", volume.ErrFull, r.ContentLength, left, size))
		return
	}
	e, err := vr.files.Write(r.Context(), vr.path, r.Body, left, o, force)
	if err != nil {
		a.contentFail(w, r, err)
		return
	}
	middleware.WriteJSON(w, http.StatusCreated, e)
}

// writeAccounted is writeFile on a Backing that keeps per-volume accounts
// (volume.Uploader: the dir backing): the upload takes its bytes from the
// volume's account as it reads them, so concurrent uploads on this node
// cannot pass the limit together, and the volume is not walked per upload.
func (a *api) writeAccounted(w http.ResponseWriter, r *http.Request, vr *volumeRequest, up volume.Uploader, o volume.Owner, force bool) {
	var freed int64
	if force { // an overwrite frees the old file's space
		if old, err := vr.files.Stat(vr.path); err == nil && old.Type == "file" {
			freed = old.Size
		}
	}
	u, err := up.BeginUpload(r.Context(), vr.vol.ID, freed)
	if err != nil {
		a.contentFail(w, r, err)
		return
	}
	ok := false
	defer func() { u.End(ok) }()
	if r.ContentLength > 0 {
		// Hold the announced size at once: 507 before reading, and the
		// bytes are this upload's while it runs.
		if err := u.Take(r.ContentLength); err != nil {
			writeContentError(w, http.StatusInsufficientStorage, "insufficient_storage", err.Error())
			return
		}
		e, err := vr.files.Write(r.Context(), vr.path, r.Body, r.ContentLength, o, force)
		if err != nil {
			a.contentFail(w, r, err)
			return
		}
		ok = true
		middleware.WriteJSON(w, http.StatusCreated, e)
		return
	}
	e, err := vr.files.Write(r.Context(), vr.path, u.Reader(r.Body), -1, o, force)
	if err != nil {
		a.contentFail(w, r, err)
		return
	}
	ok = true
	middleware.WriteJSON(w, http.StatusCreated, e)
}
