package api

import (
	"archive/tar"
	"bufio"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// E2B's template build API (v3), as the SDK's Template builder drives it:
// POST /v3/templates names the build, GET /templates/{id}/files/{hash}
// hands out upload URLs for copy() steps, POST /v2/templates/{id}/builds/
// {build} starts the build and GET …/status reports it with its log.

// BuildStore persists SDK template builds and keeps their uploaded files.
type BuildStore interface {
	store.TemplateBuildStore
	// Files holds the uploaded file sets (<files hash>.tar,
	// content-addressed by the SDK's files hash).
	Files() *FileSets
}

// TemplateTagger is implemented by template backends that can record a
// second name for a built template (tags).
type TemplateTagger interface {
	// Tag records name to for the build that from names.
	Tag(ctx context.Context, from, to string) (*TemplateInfo, error)
}

func badRequest(format string, args ...any) error {
	return &sandbox.Error{Code: http.StatusBadRequest, Msg: fmt.Sprintf(format, args...)}
}

// buildLogEntry is E2B's BuildLogEntry.
type buildLogEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	Step      string    `json:"step,omitempty"`
}

// buildReason is E2B's BuildStatusReason.
type buildReason struct {
	Message    string          `json:"message"`
	Step       string          `json:"step,omitempty"`
	LogEntries []buildLogEntry `json:"logEntries,omitempty"`
}

// buildSpec is the API's part of a stored build (store.TemplateBuild.Spec).
type buildSpec struct {
	Name     string       `json:"name"`
	Tags     []string     `json:"tags"`
	CPUCount int          `json:"cpuCount,omitempty"`
	MemoryMB int          `json:"memoryMB,omitempty"`
	Reason   *buildReason `json:"reason,omitempty"`
}

// runningBuild is a build in progress in this process.
type runningBuild struct {
	mu   sync.Mutex
	logs []buildLogEntry
}

func (rb *runningBuild) add(e buildLogEntry) {
	rb.mu.Lock()
	rb.logs = append(rb.logs, e)
	rb.mu.Unlock()
}

func (rb *runningBuild) snapshot() []buildLogEntry {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	return slices.Clone(rb.logs)
}

// sdkBuilds is the API's state of SDK builds running in this process.
type sdkBuilds struct {
	mu      sync.Mutex
	running map[string]*runningBuild
}

func (s *sdkBuilds) get(id string) *runningBuild {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running[id]
}

func (s *sdkBuilds) set(id string, rb *runningBuild) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		s.running = map[string]*runningBuild{}
	}
	if rb == nil {
		delete(s.running, id)
		return
	}
	s.running[id] = rb
}

func (a *api) buildStore(w http.ResponseWriter) (BuildStore, bool) {
	if a.opts.TemplateBuilds == nil {
		middleware.WriteError(w, http.StatusNotImplemented, "this server cannot build templates defined with the SDK")
		return nil, false
	}
	return a.opts.TemplateBuilds, true
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// requestBuildV3 answers POST /v3/templates (TemplateBuildRequestV3 →
// TemplateRequestResponseV3).
func (a *api) requestBuildV3(w http.ResponseWriter, r *http.Request) {
	bs, ok := a.buildStore(w)
	if !ok {
		return
	}
	var body struct {
		Name     string   `json:"name"`
		Alias    string   `json:"alias"`
		Tags     []string `json:"tags"`
		CPUCount int      `json:"cpuCount"`
		MemoryMB int      `json:"memoryMB"`
	}
	if !decodeBody(w, r, &body, false) {
		return
	}
	ref := body.Name
	if ref == "" {
		ref = body.Alias
	}
	name, tag, err := parseTemplateRef(ref)
	if err != nil {
		middleware.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if body.CPUCount < 0 || body.CPUCount > 64 || body.MemoryMB < 0 || body.MemoryMB > 1<<20 {
		middleware.WriteError(w, http.StatusBadRequest, "cpuCount must be 0–64 and memoryMB 0–1048576")
		return
	}
	tags := []string{}
	if tag != "" || len(body.Tags) == 0 {
		tags = append(tags, cmpOr(tag, defaultTag))
	}
	for _, t := range body.Tags {
		if !validTag(t) {
			middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("invalid tag %q: want [A-Za-z0-9][A-Za-z0-9._-]* (at most 64 characters)", t))
			return
		}
		if !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	if _, ok := a.templates.(TemplateAdmin); !ok {
		middleware.WriteError(w, http.StatusNotImplemented, "this server cannot build templates")
		return
	}
	spec, _ := json.Marshal(buildSpec{Name: name, Tags: tags, CPUCount: body.CPUCount, MemoryMB: body.MemoryMB})
	now := time.Now().UTC()
	b := &store.TemplateBuild{ID: newUUID(), TemplateID: name, Status: "waiting", CreatedAt: now, UpdatedAt: now, Spec: string(spec)}
	if err := bs.PutTemplateBuild(r.Context(), b); err != nil {
		a.fail(w, r, err)
		return
	}
	names := make([]string, len(tags))
	for i, t := range tags {
		names[i] = name + ":" + t
	}
	middleware.WriteJSON(w, http.StatusAccepted, map[string]any{
		"templateID": name, "buildID": b.ID, "names": names, "aliases": []string{name}, "tags": tags, "public": false,
	})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// filesOf returns the build store and the path's files hash, or answers
// (501 without a build store, 400 for a hash that is no sha256 hex digest).
func (a *api) filesOf(w http.ResponseWriter, r *http.Request) (BuildStore, string, bool) {
	bs, ok := a.buildStore(w)
	if !ok {
		return nil, "", false
	}
	hash := r.PathValue("hash")
	if !isSHA256(hash) {
		middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("files hash %q is not a sha256 hex digest", hash))
		return nil, "", false
	}
	return bs, hash, true
}

// fileUploadLink answers GET /templates/{id}/files/{hash}
// (TemplateBuildFileUpload): present, or where to PUT the files. E2B answers
// 201 either way, and the Python SDK's generated client accepts nothing else.
func (a *api) fileUploadLink(w http.ResponseWriter, r *http.Request) {
	bs, hash, ok := a.filesOf(w, r)
	if !ok {
		return
	}
	if bs.Files().Present(hash) {
		middleware.WriteJSON(w, http.StatusCreated, map[string]any{"present": true})
		return
	}
	scheme := "http"
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		scheme = "https"
	}
	expires := time.Now().Add(uploadURLLifetime).Unix()
	middleware.WriteJSON(w, http.StatusCreated, map[string]any{
		"present": false,
		"url": fmt.Sprintf("%s://%s/airlock/v1/template-files/%s?expires=%d&signature=%s", scheme, r.Host, hash,
			expires, a.uploadSignature(hash, expires)),
	})
}

// uploadURLLifetime is how long an upload URL is valid.
const uploadURLLifetime = time.Hour

// uploadSignature signs an upload URL: HMAC-SHA256 with the API key over
// the files hash and the expiry, so the URL is good for that hash only
// (the E2B CLI PUTs without any header, like to a presigned bucket URL).
func (a *api) uploadSignature(hash string, expires int64) string {
	m := hmac.New(sha256.New, []byte("airlock template files\x00"+a.opts.APIKey))
	fmt.Fprintf(m, "%s\x00%d", hash, expires)
	return hex.EncodeToString(m.Sum(nil))
}

// signedUpload reports whether r is a PUT of files to an upload URL signed
// for its hash and not expired.
func (a *api) signedUpload(r *http.Request) bool {
	hash, ok := strings.CutPrefix(r.URL.Path, "/airlock/v1/template-files/")
	if r.Method != http.MethodPut || !ok || a.opts.APIKey == "" {
		return false
	}
	q := r.URL.Query()
	expires, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	if err != nil || time.Now().Unix() > expires {
		return false
	}
	want := a.uploadSignature(hash, expires)
	return hmac.Equal([]byte(want), []byte(q.Get("signature")))
}

// isFileUpload reports whether r uploads a file set (a large body: capped
// like a Dockerfile build context, maxContextBytes).
func isFileUpload(r *http.Request) bool {
	return r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/airlock/v1/template-files/")
}

// uploadFiles answers PUT /airlock/v1/template-files/{hash}: the body is a
// (gzip-compressed) tar of a copy() step's files. It is checked to be a
// readable tar and stored, decompressed, under its files hash.
func (a *api) uploadFiles(w http.ResponseWriter, r *http.Request) {
	bs, hash, ok := a.filesOf(w, r)
	if !ok {
		return
	}
	tmp, err := bs.Files().CreateTemp()
	if err != nil {
		a.fail(w, r, err)
		return
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	n, err := copyTar(tmp, r.Body, maxFilesBytes, maxFilesEntries)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			middleware.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("upload larger than %d bytes", mbe.Limit))
			return
		}
		var big *tarTooLargeError
		if errors.As(err, &big) {
			middleware.WriteError(w, http.StatusRequestEntityTooLarge, "upload of files "+hash+": "+big.Error())
			return
		}
		middleware.WriteError(w, http.StatusBadRequest, "upload of files "+hash+": "+err.Error())
		return
	}
	if r.ContentLength >= 0 && n != r.ContentLength {
		middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("upload of files %s: got %d bytes, Content-Length says %d", hash, n, r.ContentLength))
		return
	}
	if err := tmp.Sync(); err != nil {
		a.fail(w, r, err)
		return
	}
	// A stored file set is never replaced: the first upload under a hash
	// stands (a later PUT with a still valid URL cannot swap the content
	// of a set that builds already use).
	if bs.Files().Present(hash) {
		w.WriteHeader(http.StatusOK)
		return
	}
	if err := bs.Files().Commit(tmp.Name(), hash); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// maxFilesBytes and maxFilesEntries cap one uploaded file set once
// decompressed: its tar stream's bytes and its entries. The compressed
// body is capped like a build context (maxContextBytes); a gzip bomb
// within it stops at these.
const (
	maxFilesBytes   = 2 << 30
	maxFilesEntries = 1_000_000
)

// tarTooLargeError is an upload over maxFilesBytes or maxFilesEntries.
type tarTooLargeError struct{ msg string }

func (e *tarTooLargeError) Error() string { return e.msg }

// limitedReader fails with a tarTooLargeError past max bytes.
type limitedReader struct {
	r      io.Reader
	n, max int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n > l.max {
		return 0, &tarTooLargeError{fmt.Sprintf("the files decompress to more than %d MiB, the most one upload may hold", l.max>>20)}
	}
	if int64(len(p)) > l.max-l.n+1 {
		p = p[:l.max-l.n+1]
	}
	n, err := l.r.Read(p)
	l.n += int64(n)
	if l.n > l.max {
		return n, &tarTooLargeError{fmt.Sprintf("the files decompress to more than %d MiB, the most one upload may hold", l.max>>20)}
	}
	return n, err
}

// copyTar reads a tar (gzip-compressed or not) from src and writes it,
// uncompressed and re-encoded entry by entry, to dst; it returns the bytes
// read from src. The decompressed stream may hold at most maxBytes bytes
// and maxEntries entries (a tarTooLargeError).
func copyTar(dst io.Writer, src io.Reader, maxBytes int64, maxEntries int) (int64, error) {
	cr := &countingReader{r: src}
	br := bufio.NewReader(cr)
	var in io.Reader = br
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return cr.n, fmt.Errorf("not a gzip stream: %w", err)
		}
		in = zr
	}
	tr := tar.NewReader(&limitedReader{r: in, max: maxBytes})
	tw := tar.NewWriter(dst)
	entries := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		var big *tarTooLargeError
		if errors.As(err, &big) {
			return cr.n, big
		}
		if err != nil {
			return cr.n, fmt.Errorf("not a readable tar: %w", err)
		}
		if entries++; entries > maxEntries {
			return cr.n, &tarTooLargeError{fmt.Sprintf("the files hold more than %d entries, the most one upload may hold", maxEntries)}
		}
		if err := tw.WriteHeader(h); err != nil {
			return cr.n, fmt.Errorf("tar entry %s: %w", h.Name, err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			var big *tarTooLargeError
			if errors.As(err, &big) {
				return cr.n, big
			}
			return cr.n, fmt.Errorf("tar entry %s: %w", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return cr.n, err
	}
	// Drain what follows the tar's end (padding) so the length check sees it all.
	if _, err := io.Copy(io.Discard, br); err != nil {
		return cr.n, err
	}
	return cr.n, nil
}

// loadBuild returns the build buildID of template id, writing the error
// itself. A build this process does not run but the store says is
// building was cut off by a daemon restart: it is marked failed.
func (a *api) loadBuild(w http.ResponseWriter, r *http.Request, bs BuildStore) (*store.TemplateBuild, *buildSpec, bool) {
	id, bid := r.PathValue("id"), r.PathValue("build")
	b, err := bs.GetTemplateBuild(r.Context(), bid)
	if errors.Is(err, store.ErrNotFound) {
		middleware.WriteError(w, http.StatusNotFound, fmt.Sprintf("build %q not found", bid))
		return nil, nil, false
	}
	if err != nil {
		a.fail(w, r, err)
		return nil, nil, false
	}
	if b.TemplateID != id {
		middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("build %s does not belong to template %q (it is a build of %q)", bid, id, b.TemplateID))
		return nil, nil, false
	}
	if b.Status == "building" && a.sdk.get(b.ID) == nil {
		// A build records its end before it leaves the running set: read
		// again, so one that just ended is not taken for an interrupted one.
		if b, err = bs.GetTemplateBuild(r.Context(), bid); err != nil {
			a.fail(w, r, err)
			return nil, nil, false
		}
	}
	var spec buildSpec
	if err := json.Unmarshal([]byte(b.Spec), &spec); err != nil {
		a.fail(w, r, fmt.Errorf("build %s: decoding spec: %w", bid, err))
		return nil, nil, false
	}
	if b.Status == "building" && a.sdk.get(b.ID) == nil {
		spec.Reason = &buildReason{Message: "the build was interrupted: the daemon stopped while it ran (nothing was recorded; build again)"}
		b.Status, b.UpdatedAt = "error", time.Now().UTC()
		sb, _ := json.Marshal(spec)
		b.Spec = string(sb)
		if err := bs.PutTemplateBuild(context.WithoutCancel(r.Context()), b); err != nil {
			a.fail(w, r, err)
			return nil, nil, false
		}
	}
	return b, &spec, true
}

// startBuildV2 answers POST /v2/templates/{id}/builds/{build}
// (TemplateBuildStartV2): checks the spec, then builds in the background.
func (a *api) startBuildV2(w http.ResponseWriter, r *http.Request) {
	bs, ok := a.buildStore(w)
	if !ok {
		return
	}
	ad, ok := a.admin(w)
	if !ok {
		return
	}
	var body sdkBuildSpec
	if !decodeBody(w, r, &body, false) {
		return
	}
	b, spec, ok := a.loadBuild(w, r, bs)
	if !ok {
		return
	}
	if b.Status != "waiting" {
		middleware.WriteError(w, http.StatusConflict, fmt.Sprintf("build %s was already started (status %s); request a new build with POST /v3/templates", b.ID, b.Status))
		return
	}
	var baseUser, baseWorkdir string
	if body.FromTemplate != "" {
		t, err := ad.Info(r.Context(), body.FromTemplate)
		if err != nil {
			if ue, ok := sandbox.AsUserError(err); ok && ue.Code == http.StatusNotFound {
				middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("base (fromTemplate): template %q not found", body.FromTemplate))
				return
			}
			a.fail(w, r, err)
			return
		}
		if t.Config != nil {
			baseUser, baseWorkdir = t.Config.User, t.Config.Workdir
		}
	}
	salt := ""
	if slices.ContainsFunc(body.Steps, func(s sdkStep) bool { return s.Force }) {
		salt = b.ID
	}
	df, err := translateSDKBuild(body, baseUser, baseWorkdir, bs.Files().Present, salt)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	// The running build's file sets are kept from GC until it ends.
	release, missing := bs.Files().Pin(df.hashes)
	if missing != "" {
		middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("the files of hash %s are no longer stored: upload them again (GET /templates/%s/files/%s)", missing, b.TemplateID, missing))
		return
	}
	rb := &runningBuild{}
	a.sdk.set(b.ID, rb)
	b.Status, b.UpdatedAt = "building", time.Now().UTC()
	if err := bs.PutTemplateBuild(r.Context(), b); err != nil {
		a.sdk.set(b.ID, nil)
		release()
		a.fail(w, r, err)
		return
	}
	go func() {
		defer release()
		a.runSDKBuild(ad, bs, b, spec, body, df, rb)
	}()
	w.WriteHeader(http.StatusAccepted)
}

// recordName is the template store's name of name:tag (the default tag is
// the bare name, so everything that knows templates by name keeps working).
func recordName(name, tag string) string {
	if tag == "" || tag == defaultTag {
		return name
	}
	return name + ":" + tag
}

// splitRecord is the inverse of recordName: the template name and tag of a
// store record (the bare name is the default tag).
func splitRecord(record string) (name, tag string) {
	name, tag, _ = strings.Cut(record, ":")
	return name, cmp.Or(tag, defaultTag)
}

func (a *api) runSDKBuild(ad TemplateAdmin, bs BuildStore, b *store.TemplateBuild, spec *buildSpec, body sdkBuildSpec, df *sdkDockerfile, rb *runningBuild) {
	ctx := context.Background()
	log := func(level, step, msg string) {
		rb.add(buildLogEntry{Timestamp: time.Now().UTC(), Level: level, Message: msg, Step: step})
	}
	total := len(body.Steps)
	log("info", "", fmt.Sprintf("Building template %s (tags %s): %d steps", spec.Name, strings.Join(spec.Tags, ", "), total))
	lastStep := -1
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeSDKContext(pw, bs, df)) }()
	opts := airlock.DockerfileBuild{Dockerfile: sdkContextDir + "/Dockerfile", CPUCount: spec.CPUCount, MemoryMB: spec.MemoryMB,
		StartCmd: body.StartCmd, ReadyCmd: body.ReadyCmd, NoCache: body.Force,
		RegistryUsername: df.registryUser, RegistryPassword: df.registryPassword}
	primary := recordName(spec.Name, spec.Tags[0])
	t, err := ad.BuildDockerfile(ctx, primary, pr, opts, func(p airlock.Progress) {
		step := df.stepOf(int(p.Done))
		stepName := strconv.Itoa(step)
		if step == 0 {
			stepName = "base"
		}
		switch p.Phase {
		case "step":
			if int(p.Done) == df.first[step] && step != lastStep {
				lastStep = step
				if step == 0 {
					log("info", stepName, "[base] "+df.desc[0])
				} else {
					log("info", stepName, fmt.Sprintf("[%d/%d] %s", step, total, df.desc[step]))
				}
			}
		case "cached":
			if int(p.Done) == df.first[step] {
				log("info", stepName, fmt.Sprintf("[%d/%d] CACHED %s", step, total, df.desc[step]))
			}
		case "output":
			log("info", stepName, p.Message)
		case "done":
			if int(p.Done) == df.first[step] {
				log("info", stepName, fmt.Sprintf("[%d/%d] %s", step, total, strings.TrimPrefix(p.Message, fmt.Sprintf("[%d/%d] ", p.Done, p.Total))))
			}
		default:
			if step == 0 && p.Done <= 1 {
				stepName = ""
			}
			log("info", stepName, p.Message)
		}
	})
	_ = pr.Close()
	if err == nil {
		for _, tag := range spec.Tags[1:] {
			if _, err = a.tag(ctx, primary, recordName(spec.Name, tag)); err != nil {
				break
			}
		}
	}
	if err != nil {
		msg, step := df.sdkError(err.Error())
		if _, user := sandbox.AsUserError(err); !user {
			a.log.Error("SDK template build failed", "template", spec.Name, "build", b.ID, "err", err)
		}
		log("error", step, "Build failed: "+msg)
		spec.Reason = &buildReason{Message: msg, Step: step}
		b.Status = "error"
	} else {
		log("info", "finalize", fmt.Sprintf("Template %s built (tags %s), layer %s", spec.Name, strings.Join(spec.Tags, ", "), short12(t.Hash)))
		b.Status = "ready"
	}
	logs := rb.snapshot()
	if spec.Reason != nil {
		spec.Reason.LogEntries = lastN(logs, 20)
	}
	sb, _ := json.Marshal(spec)
	lb, _ := json.Marshal(logs)
	b.Spec, b.Logs, b.UpdatedAt = string(sb), string(lb), time.Now().UTC()
	if err := bs.PutTemplateBuild(ctx, b); err != nil {
		a.log.Error("recording SDK template build", "build", b.ID, "err", err)
	}
	a.sdk.set(b.ID, nil)
}

func short12(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func lastN(l []buildLogEntry, n int) []buildLogEntry {
	if len(l) > n {
		return l[len(l)-n:]
	}
	return l
}

// writeSDKContext writes the build context tar: the Dockerfile and every
// uploaded file set under .e2b/files/<hash>/.
func writeSDKContext(w io.Writer, bs BuildStore, df *sdkDockerfile) error {
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Name: sdkContextDir + "/Dockerfile", Mode: 0o644, Size: int64(len(df.text)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := io.WriteString(tw, df.text); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, h := range df.hashes {
		if seen[h] {
			continue
		}
		seen[h] = true
		if err := appendTar(tw, bs.Files().path(h), df.copyDirs[h]); err != nil {
			return fmt.Errorf("files %s: %w", h, err)
		}
	}
	return tw.Close()
}

func appendTar(tw *tar.Writer, file, prefix string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(bufio.NewReader(f))
	if err := tw.WriteHeader(&tar.Header{Name: prefix + "/", Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
		return err
	}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		h.Name = prefix + "/" + strings.TrimPrefix(h.Name, "./")
		h.Uname, h.Gname, h.Uid, h.Gid = "", "", 0, 0
		h.PAXRecords = nil
		h.Format = tar.FormatUnknown
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// buildStatus answers GET /templates/{id}/builds/{build}/status
// (TemplateBuildInfo) with the log entries after logsOffset.
func (a *api) buildStatus(w http.ResponseWriter, r *http.Request) {
	bs, ok := a.buildStore(w)
	if !ok {
		return
	}
	b, spec, ok := a.loadBuild(w, r, bs)
	if !ok {
		return
	}
	offset := 0
	if v := r.URL.Query().Get("logsOffset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("invalid logsOffset %q: want a non-negative integer", v))
			return
		}
		offset = n
	}
	logs := a.buildLogs(b)
	status := b.Status
	if rb := a.sdk.get(b.ID); rb != nil {
		status = "building"
	}
	if offset > len(logs) {
		offset = len(logs)
	}
	entries := logs[offset:]
	lines := make([]string, len(entries))
	for i, e := range entries {
		lines[i] = e.Timestamp.Format(time.RFC3339) + " " + e.Message
	}
	resp := map[string]any{"buildID": b.ID, "templateID": b.TemplateID, "status": status, "logEntries": entries, "logs": lines}
	if status == "error" && spec.Reason != nil {
		resp["reason"] = spec.Reason
	}
	middleware.WriteJSON(w, http.StatusOK, resp)
}

// buildLogs returns the log of b: live while it runs, stored after.
// Never nil: the SDK reads logEntries as an array, and a status read
// before a running build's first entry must say [] rather than null.
func (a *api) buildLogs(b *store.TemplateBuild) []buildLogEntry {
	var logs []buildLogEntry
	if rb := a.sdk.get(b.ID); rb != nil {
		logs = rb.snapshot()
	} else if b.Logs != "" {
		_ = json.Unmarshal([]byte(b.Logs), &logs)
	}
	if logs == nil {
		logs = []buildLogEntry{}
	}
	return logs
}

// buildLogsV1 answers GET /templates/{id}/builds/{build}/logs
// (TemplateBuildLogsResponse): cursor (ms since the epoch), limit,
// direction and level filter the entries.
func (a *api) buildLogsV1(w http.ResponseWriter, r *http.Request) {
	bs, ok := a.buildStore(w)
	if !ok {
		return
	}
	b, _, ok := a.loadBuild(w, r, bs)
	if !ok {
		return
	}
	q := r.URL.Query()
	logs := a.buildLogs(b)
	var cursor int64
	if v := q.Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("invalid cursor %q", v))
			return
		}
		cursor = n
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1000 {
			middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("invalid limit %q: want 0–1000", v))
			return
		}
		limit = n
	}
	backward := q.Get("direction") == "backward"
	levels := map[string]int{"debug": 0, "info": 1, "warn": 2, "error": 3}
	min := levels[q.Get("level")]
	out := []buildLogEntry{}
	for i := range logs {
		e := logs[i]
		if backward {
			e = logs[len(logs)-1-i]
		}
		ms := e.Timestamp.UnixMilli()
		if cursor > 0 && (!backward && ms < cursor || backward && ms > cursor) {
			continue
		}
		if levels[e.Level] < min {
			continue
		}
		if len(out) == limit {
			break
		}
		out = append(out, e)
	}
	middleware.WriteJSON(w, http.StatusOK, map[string]any{"logs": out})
}

// sdkRoutes registers E2B's template build and tag endpoints.
func (a *api) sdkRoutes() {
	h := a.mux.HandleFunc
	h("POST /v3/templates", a.requestBuildV3)
	h("GET /templates/{id}/files/{hash}", a.fileUploadLink)
	h("PUT /airlock/v1/template-files/{hash}", a.uploadFiles)
	h("POST /v2/templates/{id}/builds/{build}", a.startBuildV2)
	h("GET /templates/{id}/builds/{build}/status", a.buildStatus)
	h("GET /templates/{id}/builds/{build}/logs", a.buildLogsV1)
	h("POST /templates/tags", a.assignTags)
	h("DELETE /templates/tags", a.deleteTags)
}
