package api

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TemplateInfo describes one built template.
type TemplateInfo struct {
	Name      string    `json:"name"`
	Hash      string    `json:"hash"`
	SizeBytes int64     `json:"sizeBytes"`
	CreatedAt time.Time `json:"createdAt"`
	// Dockerfile templates only (zero: the daemon's defaults).
	CPUCount int             `json:"cpuCount,omitempty"`
	MemoryMB int             `json:"memoryMB,omitempty"`
	Config   *TemplateConfig `json:"config,omitempty"`
}

// Progress is one build progress report.
type Progress struct {
	Phase   string `json:"phase"`
	Message string `json:"message"`
	Done    int64  `json:"done"`
	Total   int64  `json:"total"`
}

// Templates is what the API needs from the template manager.
type Templates interface {
	List(ctx context.Context) ([]TemplateInfo, error)
	// Build builds (or with force rebuilds) a template, reporting progress.
	// progress may be called from any goroutine.
	Build(ctx context.Context, name string, force bool, progress func(Progress)) (*TemplateInfo, error)
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

func (a *api) listTemplates(w http.ResponseWriter, r *http.Request) {
	ts, err := a.templates.List(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := make([]templateJSON, 0, len(ts))
	for _, t := range ts {
		out = append(out, toTemplateJSON(t))
	}
	out = append(out, a.snapshotTemplates(r)...)
	writeJSON(w, http.StatusOK, out)
}

// buildResult is the final NDJSON line of a build stream.
type buildResult struct {
	Done     bool          `json:"done,omitempty"`
	Template *templateJSON `json:"template,omitempty"`
	Error    string        `json:"error,omitempty"`
}

// buildTemplate streams NDJSON progress lines, then a final result line.
func (a *api) buildTemplate(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !validTemplateName(name) {
		writeError(w, http.StatusBadRequest, "invalid template name: want [a-z0-9][a-z0-9._-]*")
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
	t, err := a.templates.Build(r.Context(), name, force, func(p Progress) { emit(p) })
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
