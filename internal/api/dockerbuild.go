package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// maxContextBytes caps the build context tar of a Dockerfile build.
const maxContextBytes = 1 << 30

// TemplateAdmin is implemented by template backends that build from
// Dockerfiles and can describe and remove templates.
type TemplateAdmin interface {
	// BuildDockerfile builds template name from a tar of the build context.
	BuildDockerfile(ctx context.Context, name string, contextTar io.Reader, opts airlock.DockerfileBuild, progress func(airlock.Progress)) (*TemplateInfo, error)
	// Info describes one template (404 user error when unknown).
	Info(ctx context.Context, name string) (*TemplateInfo, error)
	// Remove deletes a template; refused (409 user error) while in use.
	Remove(ctx context.Context, name string) error
}

// templateDetail is GET /airlock/v1/templates/{name}.
type templateDetail struct {
	templateJSON
	Config *airlock.TemplateConfig `json:"config,omitempty"`
}

func (a *api) admin(w http.ResponseWriter) (TemplateAdmin, bool) {
	ad, ok := a.templates.(TemplateAdmin)
	if !ok {
		middleware.WriteError(w, http.StatusNotImplemented, "this server cannot build templates from Dockerfiles")
	}
	return ad, ok
}

// isContextUpload reports whether r carries a build context tar.
func isContextUpload(r *http.Request) bool {
	ct := strings.ToLower(r.Header.Get("Content-Type"))
	return strings.HasPrefix(ct, "application/x-tar") || strings.HasPrefix(ct, "application/tar")
}

// buildDockerfile streams NDJSON progress lines, then a final result line.
func (a *api) buildDockerfile(w http.ResponseWriter, r *http.Request, name string) {
	ad, ok := a.admin(w)
	if !ok {
		return
	}
	opts, err := airlock.ParseDockerfileBuild(r.URL.Query())
	if err != nil {
		middleware.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	rc := http.NewResponseController(w)
	// The context tar is read while progress lines are already streaming.
	_ = rc.EnableFullDuplex()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	emit := func(v any) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(v)
		_ = rc.Flush()
	}
	t, err := ad.BuildDockerfile(r.Context(), name, r.Body, opts, func(p airlock.Progress) { emit(p) })
	if err != nil {
		msg, code := err.Error(), http.StatusInternalServerError
		if ue, user := sandbox.AsUserError(err); user {
			code = ue.Code
		} else {
			a.log.Error("template build failed", "template", name, "err", err)
		}
		emit(buildResult{Error: msg, Code: code})
		return
	}
	tj := toTemplateJSON(*t)
	emit(buildResult{Done: true, Template: &tj})
}

func (a *api) templateInfo(w http.ResponseWriter, r *http.Request) {
	ad, ok := a.admin(w)
	if !ok {
		return
	}
	t, err := ad.Info(r.Context(), r.PathValue("name"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	middleware.WriteJSON(w, http.StatusOK, templateDetail{templateJSON: toTemplateJSON(*t), Config: t.Config})
}

func (a *api) removeTemplate(w http.ResponseWriter, r *http.Request) {
	if id := r.PathValue("id"); id != "" && a.deleteSnapshot(w, r, id) {
		return
	}
	ad, ok := a.admin(w)
	if !ok {
		return
	}
	name := r.PathValue("name")
	if name == "" {
		name = r.PathValue("id")
	}
	if a.refuseTagged(w, r, name) {
		return
	}
	if err := ad.Remove(r.Context(), name); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
