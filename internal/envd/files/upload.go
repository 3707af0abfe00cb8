//go:build linux

package files

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/envd/filesystem"
	"github.com/airlock-sandbox/airlock/internal/envd/identity"
	"github.com/airlock-sandbox/airlock/internal/guest"
)

// TempPrefix starts the name of every in-progress upload file (created next
// to its destination and renamed into place when complete). Watchers hide
// such names.
const TempPrefix = filesystem.UploadTempPrefix

const metadataHeaderPrefix = "X-Metadata-"

// copyBufSize is the streaming buffer per upload; uploads never hold more.
const copyBufSize = 256 << 10

// WrittenEntry is one element of the POST /files response.
type WrittenEntry struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

func (h *handler) upload(w http.ResponseWriter, r *http.Request) error {
	if err := h.authorize(r, guest.OpWrite); err != nil {
		return err
	}
	u, err := h.actingUser(r)
	if err != nil {
		return err
	}
	meta, err := metadataFromHeaders(r.Header)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	queryPath, hasPath := q.Get("path"), q.Has("path") && q.Get("path") != ""

	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return userError(http.StatusBadRequest, "invalid or missing Content-Type: %v", err)
	}
	var written []WrittenEntry
	switch mediaType {
	case "application/octet-stream":
		if !hasPath {
			return userError(http.StatusBadRequest, "the path query parameter is required for application/octet-stream uploads")
		}
		var body io.Reader = r.Body
		switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
		case "", "identity":
		case "gzip", "x-gzip":
			gz, err := gzip.NewReader(r.Body)
			if err != nil {
				return userError(http.StatusBadRequest, "invalid gzip request body: %v", err)
			}
			defer gz.Close()
			body = gz
		default:
			return userError(http.StatusBadRequest, "unsupported Content-Encoding %q", enc)
		}
		p := identity.ResolvePath(queryPath, u.Home, h.st.DefaultWorkdir())
		e, err := h.writeFile(u, p, body, meta)
		if err != nil {
			return err
		}
		written = append(written, e)
	case "multipart/form-data":
		mr, err := r.MultipartReader()
		if err != nil {
			return userError(http.StatusBadRequest, "invalid multipart body: %v", err)
		}
		seen := map[string]bool{}
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return userError(http.StatusBadRequest, "reading multipart body: %v", err)
			}
			if part.FormName() != "file" {
				_ = part.Close()
				continue
			}
			target := queryPath
			if !hasPath {
				// The raw filename, slashes included (Part.FileName would strip directories).
				target = rawFilename(part.Header.Get("Content-Disposition"))
				if target == "" {
					_ = part.Close()
					return userError(http.StatusBadRequest, "a file part has no filename and no path query parameter was given")
				}
			}
			p := identity.ResolvePath(target, u.Home, h.st.DefaultWorkdir())
			if seen[p] {
				_ = part.Close()
				return userError(http.StatusBadRequest, "you cannot upload multiple files to the same path '%s' in one upload request", p)
			}
			seen[p] = true
			e, err := h.writeFile(u, p, part, meta)
			_ = part.Close()
			if err != nil {
				return err
			}
			written = append(written, e)
		}
		if len(written) == 0 {
			return userError(http.StatusBadRequest, "no part named 'file' in the multipart body")
		}
	default:
		return userError(http.StatusBadRequest, "unsupported Content-Type %q (use multipart/form-data or application/octet-stream)", mediaType)
	}
	writeJSON(w, http.StatusOK, written)
	return nil
}

// rawFilename extracts the filename parameter of a Content-Disposition
// header without dropping directory components.
func rawFilename(cd string) string {
	_, params, err := mime.ParseMediaType(cd)
	if err != nil {
		return ""
	}
	return params["filename"]
}

// metadataFromHeaders collects X-Metadata-<key> headers (keys lowercased).
// It returns nil when there are none.
func metadataFromHeaders(h http.Header) (map[string]string, error) {
	var meta map[string]string
	for k, vs := range h {
		if len(k) <= len(metadataHeaderPrefix) || !strings.EqualFold(k[:len(metadataHeaderPrefix)], metadataHeaderPrefix) {
			continue
		}
		key := strings.ToLower(k[len(metadataHeaderPrefix):])
		for _, c := range []byte(key) {
			if c <= ' ' || c > '~' {
				return nil, userError(http.StatusBadRequest, "metadata key %q must be printable ASCII", key)
			}
		}
		val := ""
		if len(vs) > 0 {
			val = vs[0]
		}
		if meta == nil {
			meta = map[string]string{}
		}
		meta[key] = val
	}
	return meta, nil
}

// writeFile streams src into path as user u: parents are created (0755),
// data goes to a temp file in the destination directory which is renamed
// over the destination only when complete, so a failed upload never leaves
// a truncated file nor loses the previous content. The new file has
// exactly meta as its metadata: a write without metadata clears what an
// overwritten file had, as E2B's envd does. Metadata goes into user.e2b.*
// xattrs of the temp file before the rename; a filesystem without user
// xattrs refuses an upload that sets metadata (400).
func (h *handler) writeFile(u *identity.User, path string, src io.Reader, meta map[string]string) (WrittenEntry, error) {
	var (
		final    string
		tmp      *os.File
		replaces bool // final exists: the upload overwrites it
	)
	if err := ensureParents(filepath.Dir(path), u); err != nil {
		return WrittenEntry{}, fsError("creating parent directories of "+path, err)
	}
	err := identity.RunAs(u, func() error {
		final = path
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			// Write through a symlink to its target, like open(2) would.
			if real, err := filepath.EvalSymlinks(path); err == nil {
				final = real
			}
		}
		mode := fs.FileMode(0o644)
		fi, err := os.Stat(final)
		switch {
		case err == nil && fi.IsDir():
			return userError(http.StatusBadRequest, "path '%s' is a directory", path)
		case err == nil && !fi.Mode().IsRegular():
			return userError(http.StatusBadRequest, "path '%s' is not a regular file", path)
		case err == nil:
			// The user must be allowed to modify the existing file itself.
			f, err := os.OpenFile(final, os.O_WRONLY, 0)
			if err != nil {
				return fsError("opening "+path+" for writing", err)
			}
			_ = f.Close()
			mode = fi.Mode().Perm()
			replaces = true
		case errors.Is(err, fs.ErrNotExist):
			if err := filesystem.MkdirAllMode(filepath.Dir(final), 0o755); err != nil {
				return fsError("creating parent directories of "+path, err)
			}
		default:
			return fsError("stat "+path, err)
		}
		prefix := TempPrefix
		if replaces {
			prefix = filesystem.UploadReplacePrefix
		}
		tmp, err = os.CreateTemp(filepath.Dir(final), prefix+"*")
		if err != nil {
			return fsError("creating "+path, err)
		}
		if err := tmp.Chmod(mode); err != nil {
			return fsError("chmod "+path, err)
		}
		return nil
	})
	if err != nil {
		if tmp != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
		return WrittenEntry{}, err
	}
	committed := false
	defer func() {
		if !committed {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()

	size, err := copyData(tmp, src)
	if err != nil {
		return WrittenEntry{}, err
	}
	setMeta := meta
	// xattrs go on the temp file so they appear together with the content.
	if len(setMeta) > 0 {
		err := h.meta.SetXattrs(tmp, setMeta)
		switch {
		case err == nil:
		case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
			return WrittenEntry{}, &apiError{status: http.StatusInsufficientStorage, msg: "no space left for file metadata", err: err}
		case errors.Is(err, filesystem.ErrXattrsUnsupported):
			return WrittenEntry{}, userError(http.StatusBadRequest, "cannot store metadata: the filesystem of '%s' has no extended attributes", path)
		default:
			return WrittenEntry{}, userError(http.StatusBadRequest, "cannot store metadata: %v", err)
		}
	}
	if err := identity.RunAs(u, func() error { return os.Rename(tmp.Name(), final) }); err != nil {
		return WrittenEntry{}, fsError("replacing "+path, err)
	}
	committed = true
	// Watchers see what E2B's agent causes, which opens the destination
	// with O_CREATE|O_TRUNC, chowns it to the user, then writes: CREATE,
	// CHMOD, WRITE for a new file; CHMOD, WRITE for an overwrite. The rename
	// is the CREATE (dropped by the watcher for an overwrite, see
	// filesystem.UploadReplacePrefix); a chown to the owner it already has
	// through the still-open descriptor is the CHMOD (IN_ATTRIB); a
	// same-size truncate is the WRITE (IN_MODIFY), which a new empty file
	// does not get (E2B writes nothing then).
	_ = unix.Fchown(int(tmp.Fd()), int(u.UID), int(u.GID))
	if size > 0 || replaces {
		_ = tmp.Truncate(size)
	}
	if err := tmp.Close(); err != nil {
		return WrittenEntry{}, fsError("closing "+path, err)
	}
	e := WrittenEntry{Path: path, Name: filepath.Base(path), Type: "file"}
	if len(setMeta) > 0 {
		e.Metadata = setMeta
	}
	return e, nil
}

// ensureParents creates the missing directories of dir with root rights
// and hands each new one to u (0755, owned by u), as E2B's envd does: a
// user may write /new/dir/file although only root can create /new.
// Directories that exist are left as they are. Without root (an agent run
// by hand) the user's own MkdirAll later in writeFile does what it can.
func ensureParents(dir string, u *identity.User) error {
	if os.Geteuid() != 0 {
		return nil
	}
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err == nil {
			if !fi.IsDir() {
				return &fs.PathError{Op: "mkdir", Path: d, Err: unix.ENOTDIR}
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if parent := filepath.Dir(d); parent == d {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		d := missing[i]
		if err := os.Mkdir(d, 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) {
				if fi, serr := os.Stat(d); serr == nil && fi.IsDir() {
					continue // raced with another creator: not ours to chown
				}
			}
			return err
		}
		afterMkdir(d)
		if err := handOver(d, u); err != nil {
			return err
		}
	}
	return nil
}

// afterMkdir is a test hook: it runs between ensureParents' mkdir and the
// hand-over, where a racing process could swap the new directory.
var afterMkdir = func(string) {}

// handOver sets the directory ensureParents just made (as root) to 0755
// (Mkdir applies the umask) and gives it to u. It acts on a descriptor
// opened without following a symlink, and only when that is still an empty
// root-owned directory: a sandbox process that renames the new directory
// away and puts a symlink to /etc/shadow (or its own directory) in its place
// gets an error, not a chmod of the link's target (review R2-3).
func handOver(d string, u *identity.User) error {
	fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: d, Err: fmt.Errorf("directory replaced while it was created: %w", err)}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "fstat", Path: d, Err: err}
	}
	if st.Uid != 0 || st.Nlink != 2 {
		return &fs.PathError{Op: "mkdir", Path: d, Err: errors.New("directory replaced while it was created")}
	}
	if err := unix.Fchmod(fd, 0o755); err != nil {
		return &fs.PathError{Op: "chmod", Path: d, Err: err}
	}
	if u != nil {
		if err := unix.Fchown(fd, int(u.UID), int(u.GID)); err != nil {
			return &fs.PathError{Op: "chown", Path: d, Err: err}
		}
	}
	return nil
}

// copyData copies src into dst, telling read failures (client's fault: 400)
// from write failures (507 when out of space).
func copyData(dst *os.File, src io.Reader) (int64, error) {
	buf := make([]byte, copyBufSize)
	var n int64
	for {
		nr, rerr := src.Read(buf)
		if nr > 0 {
			nw, werr := dst.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				return n, fsError("writing file", werr)
			}
		}
		if errors.Is(rerr, io.EOF) {
			return n, nil
		}
		if rerr != nil {
			var me *http.MaxBytesError
			if errors.As(rerr, &me) {
				return n, userError(http.StatusRequestEntityTooLarge, "upload too large")
			}
			return n, userError(http.StatusBadRequest, "reading upload body: %v", rerr)
		}
	}
}
