package api

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// TemplateInfo describes one built template.
type TemplateInfo struct {
	Name      string    `json:"name"`
	Hash      string    `json:"hash"`
	SizeBytes int64     `json:"sizeBytes"`
	CreatedAt time.Time `json:"createdAt"`
	// Dockerfile templates only (zero: the daemon's defaults).
	CPUCount int                     `json:"cpuCount,omitempty"`
	MemoryMB int                     `json:"memoryMB,omitempty"`
	Config   *airlock.TemplateConfig `json:"config,omitempty"`
}

// Templates is what the API needs from the template manager.
type Templates interface {
	List(ctx context.Context) ([]TemplateInfo, error)
	// Build builds (or with force rebuilds) a template, reporting progress.
	// progress may be called from any goroutine.
	Build(ctx context.Context, name string, force bool, progress func(airlock.Progress)) (*TemplateInfo, error)
}

// templateJSON follows E2B's Template schema as far as it applies.
type templateJSON struct {
	TemplateID    string     `json:"templateID"`
	BuildID       string     `json:"buildID"`
	Aliases       []string   `json:"aliases"`
	Names         []string   `json:"names"`
	Public        bool       `json:"public"`
	CPUCount      int        `json:"cpuCount"`
	MemoryMB      int        `json:"memoryMB"`
	DiskSizeMB    int        `json:"diskSizeMB"`
	SizeBytes     int64      `json:"sizeBytes"`
	EnvdVersion   string     `json:"envdVersion"`
	BuildStatus   string     `json:"buildStatus"`
	BuildCount    int        `json:"buildCount"`
	SpawnCount    int        `json:"spawnCount"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
	LastSpawnedAt *time.Time `json:"lastSpawnedAt"`
	CreatedBy     *string    `json:"createdBy"`
	// Tags are the template's tags ("default" for the bare name); an
	// Airlock extension of E2B's Template, which lists them separately
	// (GET /templates/{id}/tags).
	Tags []string `json:"tags,omitempty"`
	// Snapshot marks a named snapshot listed as a template.
	Snapshot bool `json:"snapshot,omitempty"`
}

func toTemplateJSON(t TemplateInfo) templateJSON {
	return templateJSON{
		TemplateID:  t.Name,
		BuildID:     t.Hash,
		Aliases:     []string{t.Name},
		Names:       []string{t.Name},
		CPUCount:    cmp.Or(t.CPUCount, sandbox.DefaultCPUCount),
		MemoryMB:    cmp.Or(t.MemoryMB, sandbox.DefaultMemoryMB),
		DiskSizeMB:  sandbox.DefaultDiskSizeMB,
		SizeBytes:   t.SizeBytes,
		EnvdVersion: sandbox.EnvdVersion,
		BuildStatus: "ready",
		BuildCount:  1,
		CreatedAt:   t.CreatedAt.UTC(),
		UpdatedAt:   t.CreatedAt.UTC(),
	}
}

// allTemplates is every template E2B's template reads see: the built
// templates, one entry per name with its tags (see groupTemplates), and the
// named snapshots.
func (a *api) allTemplates(r *http.Request) ([]templateJSON, error) {
	ts, err := a.templates.List(r.Context())
	if err != nil {
		return nil, err
	}
	return append(groupTemplates(ts), a.snapshotTemplates(r)...), nil
}

// groupTemplates turns template records into E2B's Template entries: the
// records of one name (name for name:default, "name:tag" for its other
// tags) are one template, as on E2B, whose build is the default tag's (else
// the newest tag's) and whose tags are listed in Tags. Entries keep the
// order in which their names first appear.
func groupTemplates(ts []TemplateInfo) []templateJSON {
	type group struct {
		rep   TemplateInfo
		def   bool
		tags  []string
		hash  map[string]bool
		first time.Time
	}
	var order []string
	groups := map[string]*group{}
	for _, t := range ts {
		name, tag := splitRecord(t.Name)
		g := groups[name]
		if g == nil {
			g = &group{rep: t, hash: map[string]bool{}, first: t.CreatedAt}
			groups[name] = g
			order = append(order, name)
		}
		switch {
		case tag == defaultTag:
			g.rep, g.def = t, true
		case !g.def && t.CreatedAt.After(g.rep.CreatedAt):
			g.rep = t
		}
		if t.CreatedAt.Before(g.first) {
			g.first = t.CreatedAt
		}
		g.tags = append(g.tags, tag)
		g.hash[t.Hash] = true
	}
	out := make([]templateJSON, 0, len(order))
	for _, name := range order {
		g := groups[name]
		tj := toTemplateJSON(g.rep)
		tj.TemplateID, tj.Aliases, tj.Names = name, []string{name}, []string{name}
		slices.Sort(g.tags)
		tj.Tags = g.tags
		tj.BuildCount = len(g.hash)
		tj.CreatedAt = g.first.UTC()
		out = append(out, tj)
	}
	return out
}

// listTemplates answers GET /templates and GET /v2/templates (Template[];
// one page, so no X-Next-Token).
func (a *api) listTemplates(w http.ResponseWriter, r *http.Request) {
	out, err := a.allTemplates(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	middleware.WriteJSON(w, http.StatusOK, out)
}

// findTemplate returns the template whose id, alias or name is ref. ref
// may name a tag, name:tag: then that tag must exist (404 otherwise, as on
// E2B), and the template is returned.
func (a *api) findTemplate(w http.ResponseWriter, r *http.Request, ref string) (templateJSON, bool) {
	all, err := a.allTemplates(r)
	if err != nil {
		a.fail(w, r, err)
		return templateJSON{}, false
	}
	match := func(id string) (templateJSON, bool) {
		for _, t := range all {
			if t.TemplateID == id || slices.Contains(t.Aliases, id) || slices.Contains(t.Names, id) {
				return t, true
			}
		}
		return templateJSON{}, false
	}
	if t, ok := match(ref); ok {
		return t, true
	}
	if name, tag, ok := strings.Cut(ref, ":"); ok {
		if t, ok := match(name); ok && !t.Snapshot {
			if slices.Contains(t.Tags, cmp.Or(tag, defaultTag)) {
				return t, true
			}
			middleware.WriteError(w, http.StatusNotFound, fmt.Sprintf("tag '%s' does not exist for template '%s'", cmp.Or(tag, defaultTag), name))
			return templateJSON{}, false
		}
	}
	middleware.WriteError(w, http.StatusNotFound, fmt.Sprintf("template %q not found", ref))
	return templateJSON{}, false
}

// buildUUID is a template's build id in the uuid shape E2B's TemplateBuild
// and TemplateTag carry (the first 128 bits of the content hash).
func buildUUID(hash string) string {
	sum := sha256.Sum256([]byte(hash))
	h := hex.EncodeToString(sum[:16])
	if len(hash) >= 32 && isHex(hash[:32]) {
		h = strings.ToLower(hash[:32])
	}
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// templateBuildJSON is E2B's TemplateBuild.
type templateBuildJSON struct {
	BuildID     string     `json:"buildID"`
	Status      string     `json:"status"`
	CreatedAt   time.Time  `json:"createdAt"`
	UpdatedAt   time.Time  `json:"updatedAt"`
	FinishedAt  *time.Time `json:"finishedAt,omitempty"`
	CPUCount    int        `json:"cpuCount"`
	MemoryMB    int        `json:"memoryMB"`
	DiskSizeMB  int        `json:"diskSizeMB"`
	EnvdVersion string     `json:"envdVersion"`
	// Airlock extensions, for builds of E2B's build API (SDK builds): the
	// tags the build was asked for, and why it failed.
	Tags   []string `json:"tags,omitempty"`
	Reason string   `json:"reason,omitempty"`
}

// maxListedBuilds bounds the builds GET /templates/{id} returns.
const maxListedBuilds = 100

// sdkBuildsOf returns the SDK builds of template name (E2B's build API),
// newest first; none when the server keeps no builds.
func (a *api) sdkBuildsOf(r *http.Request, t templateJSON) ([]templateBuildJSON, error) {
	bs := a.opts.TemplateBuilds
	if bs == nil || t.Snapshot {
		return nil, nil
	}
	list, err := bs.ListTemplateBuilds(r.Context(), t.TemplateID, maxListedBuilds)
	if err != nil {
		return nil, err
	}
	out := make([]templateBuildJSON, 0, len(list))
	for _, b := range list {
		if b.Status == "building" && a.sdk.get(b.ID) == nil {
			// It may have ended since the list was read: read it again.
			if nb, err := bs.GetTemplateBuild(r.Context(), b.ID); err == nil {
				b = nb
			}
		}
		var spec buildSpec
		_ = json.Unmarshal([]byte(b.Spec), &spec)
		bj := templateBuildJSON{BuildID: b.ID, Status: b.Status, CreatedAt: b.CreatedAt.UTC(), UpdatedAt: b.UpdatedAt.UTC(),
			CPUCount: cmp.Or(spec.CPUCount, sandbox.DefaultCPUCount), MemoryMB: cmp.Or(spec.MemoryMB, sandbox.DefaultMemoryMB),
			DiskSizeMB: sandbox.DefaultDiskSizeMB, EnvdVersion: sandbox.EnvdVersion, Tags: spec.Tags}
		switch running := a.sdk.get(b.ID) != nil; {
		case running:
			bj.Status = "building"
		case b.Status == "building":
			// Cut off by a restart (its status read marks it so).
			bj.Status, bj.Reason = "error", "the build was interrupted: the daemon stopped while it ran"
		}
		if bj.Status == "ready" || bj.Status == "error" {
			fin := bj.UpdatedAt
			bj.FinishedAt = &fin
		}
		if spec.Reason != nil && bj.Reason == "" {
			bj.Reason = spec.Reason.Message
		}
		out = append(out, bj)
	}
	return out, nil
}

// templateWithBuildsJSON is E2B's TemplateWithBuilds.
type templateWithBuildsJSON struct {
	TemplateID    string              `json:"templateID"`
	Public        bool                `json:"public"`
	Aliases       []string            `json:"aliases"`
	Names         []string            `json:"names"`
	CreatedAt     time.Time           `json:"createdAt"`
	UpdatedAt     time.Time           `json:"updatedAt"`
	LastSpawnedAt *time.Time          `json:"lastSpawnedAt"`
	SpawnCount    int                 `json:"spawnCount"`
	Builds        []templateBuildJSON `json:"builds"`
}

// getTemplate answers GET /templates/{id} with TemplateWithBuilds: the
// builds of E2B's build API (SDK builds, newest first, with their status
// while they run), else one build: the current one.
func (a *api) getTemplate(w http.ResponseWriter, r *http.Request) {
	t, ok := a.findTemplate(w, r, r.PathValue("id"))
	if !ok {
		return
	}
	builds, err := a.sdkBuildsOf(r, t)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if len(builds) == 0 {
		fin := t.UpdatedAt
		builds = []templateBuildJSON{{
			BuildID: buildUUID(t.BuildID), Status: t.BuildStatus, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
			FinishedAt: &fin, CPUCount: t.CPUCount, MemoryMB: t.MemoryMB, DiskSizeMB: t.DiskSizeMB,
			EnvdVersion: t.EnvdVersion,
		}}
	}
	middleware.WriteJSON(w, http.StatusOK, templateWithBuildsJSON{
		TemplateID: t.TemplateID, Public: t.Public, Aliases: t.Aliases, Names: t.Names,
		CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, LastSpawnedAt: t.LastSpawnedAt, SpawnCount: t.SpawnCount,
		Builds: builds,
	})
}

// templateSubresource answers GET /templates/aliases/{alias} (E2B's
// TemplateAliasResponse, 404 for an unknown alias or, for name:tag, a tag
// the template does not have: the SDK's Template.exists) and GET /templates/{id}/tags (TemplateTag[]: every
// template has its current build under the tag "default").
func (a *api) templateSubresource(w http.ResponseWriter, r *http.Request) {
	id, sub := r.PathValue("id"), r.PathValue("sub")
	switch {
	case id == "aliases":
		t, ok := a.findTemplate(w, r, sub)
		if !ok {
			return
		}
		middleware.WriteJSON(w, http.StatusOK, struct {
			TemplateID string `json:"templateID"`
			Public     bool   `json:"public"`
		}{t.TemplateID, t.Public})
	case sub == "tags":
		a.templateTags(w, r, id)
	default:
		middleware.WriteError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
	}
}

// buildResult is the final NDJSON line of a build stream.
type buildResult struct {
	Done     bool          `json:"done,omitempty"`
	Template *templateJSON `json:"template,omitempty"`
	Error    string        `json:"error,omitempty"`
	// Code is the HTTP status the error would have answered (4xx: the
	// request was refused, 500: the daemon failed); the stream itself
	// started with 200.
	Code int `json:"code,omitempty"`
}

// buildTemplate streams NDJSON progress lines, then a final result line.
func (a *api) buildTemplate(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !validTemplateName(name) {
		middleware.WriteError(w, http.StatusBadRequest, "invalid template name: want [a-z0-9][a-z0-9._-]*")
		return
	}
	if isContextUpload(r) {
		a.buildDockerfile(w, r, name)
		return
	}
	force := r.URL.Query().Get("force") == "true" || r.URL.Query().Get("force") == "1"
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()

	var mu sync.Mutex // serialises writes from progress callbacks
	enc := json.NewEncoder(w)
	emit := func(v any) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(v)
		_ = rc.Flush()
	}
	t, err := a.templates.Build(r.Context(), name, force, func(p airlock.Progress) { emit(p) })
	if err != nil {
		msg := err.Error()
		if _, user := sandbox.AsUserError(err); !user {
			a.log.Error("template build failed", "template", name, "err", err)
		}
		emit(buildResult{Error: msg})
		return
	}
	tj := toTemplateJSON(*t)
	emit(buildResult{Done: true, Template: &tj})
}

// validTemplateName restricts names to something safe for paths and hosts.
func validTemplateName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '-' || c == '_' || c == '.'):
		default:
			return false
		}
	}
	return true
}
