//go:build linux

package files

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/envd/filesystem"
	"github.com/airlock-sandbox/airlock/internal/envd/identity"
	"github.com/airlock-sandbox/airlock/internal/envd/state"
	"github.com/airlock-sandbox/airlock/internal/guest"
)

// AccessTokenHeader carries the agent's access token.
const AccessTokenHeader = "X-Access-Token"

type handler struct {
	st   *state.State
	log  *slog.Logger
	now  func() time.Time
	meta *filesystem.MetadataStore
}

// New returns the handler for `GET /files` and `POST /files`. Mount it at
// "/files"; it answers 404 for any other path.
func New(st *state.State, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	return &handler{st: st, log: log.With("service", "files"), now: time.Now, meta: filesystem.DefaultMetadataStore()}
}

// apiError is an error with the HTTP status and client-facing message.
type apiError struct {
	status int
	msg    string
	err    error // internal cause, logged for 5xx
}

func (e *apiError) Error() string { return e.msg }
func (e *apiError) Unwrap() error { return e.err }

func userError(status int, format string, args ...any) *apiError {
	return &apiError{status: status, msg: fmt.Sprintf(format, args...)}
}

// fsError classifies a filesystem error for the client.
func fsError(what string, err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		status = http.StatusNotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		status = http.StatusForbidden
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		status = http.StatusInsufficientStorage
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.EINVAL),
		errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ELOOP), errors.Is(err, fs.ErrExist):
		status = http.StatusBadRequest
	}
	return &apiError{status: status, msg: fmt.Sprintf("%s: %v", what, err), err: err}
}

func (h *handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{status: http.StatusInternalServerError, msg: "internal error", err: err}
	}
	if ae.status >= 500 {
		h.log.Error("files request failed", "method", r.Method, "path", r.URL.Query().Get("path"), "status", ae.status, "err", err)
	} else {
		h.log.Debug("files request rejected", "method", r.Method, "status", ae.status, "msg", ae.msg)
	}
	writeJSON(w, ae.status, map[string]any{"code": ae.status, "message": ae.msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("Content-Encoding")
	w.Header().Del("Content-Disposition")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/files" {
		h.writeError(w, r, userError(http.StatusNotFound, "not found"))
		return
	}
	var err error
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		err = h.download(w, r)
	case http.MethodPost:
		err = h.upload(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		err = userError(http.StatusMethodNotAllowed, "method %s not allowed", r.Method)
	}
	if err != nil {
		h.writeError(w, r, err)
	}
}

// authorize applies the /files rule: a present X-Access-Token header must
// match; otherwise, when a token is configured, a valid URL signature for
// operation is required.
func (h *handler) authorize(r *http.Request, operation string) error {
	token := h.st.AccessToken()
	if token == "" {
		return nil
	}
	if got := r.Header.Get(AccessTokenHeader); got != "" {
		if !h.st.CheckToken(got) {
			return userError(http.StatusUnauthorized, "access token present in header but does not match")
		}
		return nil
	}
	if err := guest.VerifySignature(r.URL.Query(), operation, token, h.now()); err != nil {
		return &apiError{status: http.StatusUnauthorized, msg: err.Error()}
	}
	return nil
}

// actingUser resolves the `username` query parameter (default user if empty).
func (h *handler) actingUser(r *http.Request) (*identity.User, error) {
	name := r.URL.Query().Get("username")
	if name == "" {
		name = h.st.DefaultUser()
	}
	u, err := identity.Lookup(name)
	if err != nil {
		if errors.Is(err, identity.ErrUnknownUser) {
			return nil, userError(http.StatusUnauthorized, "invalid username: '%s'", name)
		}
		return nil, &apiError{status: http.StatusInternalServerError, msg: "looking up user", err: err}
	}
	return u, nil
}

func (h *handler) download(w http.ResponseWriter, r *http.Request) error {
	if err := h.authorize(r, guest.OpRead); err != nil {
		return err
	}
	u, err := h.actingUser(r)
	if err != nil {
		return err
	}
	p := identity.ResolvePath(r.URL.Query().Get("path"), u.Home, h.st.DefaultWorkdir())
	useGzip, ok := negotiateEncoding(r.Header.Get("Accept-Encoding"))
	if !ok {
		return userError(http.StatusNotAcceptable, "no acceptable content encoding (supported: gzip, identity)")
	}

	var f *os.File
	err = identity.RunAs(u, func() error {
		var err error
		// O_NONBLOCK so a FIFO cannot hang the open; regular files ignore it.
		f, err = os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		return err
	})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return userError(http.StatusNotFound, "path '%s' does not exist", p)
		}
		return fsError("opening "+p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fsError("stat "+p, err)
	}
	if fi.IsDir() {
		return userError(http.StatusBadRequest, "path '%s' is a directory", p)
	}
	if fi.Mode()&(fs.ModeSocket|fs.ModeSymlink) != 0 {
		return userError(http.StatusBadRequest, "path '%s' is not a file", p)
	}
	// Like E2B's agent, a Range or conditional request is answered in
	// identity encoding, so ServeContent's 206 and 304 keep working (the
	// encoding a client accepts is advisory).
	if r.Header.Get("Range") != "" || r.Header.Get("If-Range") != "" ||
		r.Header.Get("If-Modified-Since") != "" || r.Header.Get("If-None-Match") != "" {
		useGzip = false
	}

	hdr := w.Header()
	hdr.Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": filepath.Base(p)}))
	hdr.Add("Vary", "Accept-Encoding")

	// A file of unknown length (a pipe, a device, /proc and /sys files,
	// whose stat size is 0 or a page whatever they hold) cannot be seeked
	// to its end: it is streamed as read, without Content-Length, and a
	// Range is ignored (RFC 9110 §14.2 lets a server send the whole
	// representation).
	body := bufio.NewReaderSize(f, gzipSample)
	knownLength := fi.Mode().IsRegular() && !pseudoFS(f)
	if knownLength && fi.Size() == 0 {
		// Empty, or a pseudo file the filesystem type did not give away.
		if _, err := body.Peek(1); err == io.EOF {
			// A truly empty file: Content-Length: 0 (the JS SDK relies
			// on it) and never a gzip body.
			http.ServeContent(w, r, filepath.Base(p), fi.ModTime(), f)
			return nil
		}
		knownLength = false
	}
	if knownLength && useGzip && !worthCompressing(body) {
		// Already compressed (an archive, an image, random bytes): gzip
		// would cost the sandbox's CPU for nothing. Identity is always
		// acceptable here (negotiateEncoding said so), with a length.
		useGzip = false
	}
	if knownLength && !useGzip {
		// ServeContent: Content-Length, type, Last-Modified, Range, conditionals.
		http.ServeContent(w, r, filepath.Base(p), fi.ModTime(), f)
		return nil
	}

	ctype := mime.TypeByExtension(filepath.Ext(p))
	if ctype == "" {
		head, _ := body.Peek(512) // sniffed from the buffer: nothing is seeked
		ctype = http.DetectContentType(head)
	}
	hdr.Set("Content-Type", ctype)
	if useGzip {
		hdr.Set("Content-Encoding", "gzip")
	}
	if fi.Mode().IsRegular() {
		hdr.Set("Last-Modified", fi.ModTime().UTC().Format(http.TimeFormat))
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	var dst io.Writer = w
	var gz *gzip.Writer
	if useGzip {
		gz, _ = gzip.NewWriterLevel(w, gzip.BestSpeed)
		dst = gz
	}
	if _, err := io.Copy(dst, body); err != nil {
		h.log.Debug("download aborted", "path", p, "err", err)
		return nil // headers are out; nothing useful left to tell the client
	}
	if gz != nil {
		if err := gz.Close(); err != nil {
			h.log.Debug("gzip download aborted", "path", p, "err", err)
		}
	}
	return nil
}

// gzipSample is how much of a file worthCompressing tries.
const gzipSample = 64 << 10

// worthCompressing reports whether gzip shrinks the start of body (up to
// gzipSample bytes, peeked: nothing is consumed) by at least a tenth.
func worthCompressing(body *bufio.Reader) bool {
	head, _ := body.Peek(gzipSample)
	if len(head) < 512 {
		return true // too little to judge, and cheap either way
	}
	var n countWriter
	zw, _ := gzip.NewWriterLevel(&n, gzip.BestSpeed)
	zw.Write(head)
	zw.Close()
	return int(n) < len(head)*9/10
}

// countWriter counts the bytes written to it.
type countWriter int

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

// pseudoFS reports whether f lives on a filesystem whose files' stat size
// says nothing about their content (procfs, sysfs and their kin).
func pseudoFS(f *os.File) bool {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return true // unknown: streaming is always correct
	}
	switch int64(st.Type) {
	case unix.PROC_SUPER_MAGIC, unix.SYSFS_MAGIC, unix.DEBUGFS_MAGIC, unix.TRACEFS_MAGIC,
		unix.CGROUP_SUPER_MAGIC, unix.CGROUP2_SUPER_MAGIC, unix.SECURITYFS_MAGIC,
		unix.PSTOREFS_MAGIC, unix.BPF_FS_MAGIC, unix.EFIVARFS_MAGIC:
		return true
	}
	return false
}

// negotiateEncoding picks gzip or identity from an Accept-Encoding header.
// ok is false when neither is acceptable.
func negotiateEncoding(header string) (useGzip, ok bool) {
	if strings.TrimSpace(header) == "" {
		return false, true
	}
	q := map[string]float64{}
	for _, part := range strings.Split(header, ",") {
		name, params, _ := strings.Cut(part, ";")
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" {
			continue
		}
		weight := 1.0
		for _, p := range strings.Split(params, ";") {
			k, v, found := strings.Cut(strings.TrimSpace(p), "=")
			if found && strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					weight = f
				}
			}
		}
		q[name] = weight
	}
	lookup := func(name string) (float64, bool) {
		if v, ok := q[name]; ok {
			return v, true
		}
		v, ok := q["*"]
		return v, ok
	}
	if v, found := lookup("gzip"); found && v > 0 {
		return true, true
	}
	if v, found := q["x-gzip"]; found && v > 0 {
		return true, true
	}
	if v, found := lookup("identity"); found && v <= 0 {
		return false, false
	}
	return false, true
}
