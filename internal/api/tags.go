package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/middleware"
)

// Tags: a template name may carry a tag, name:tag; a bare name means
// name:default, as on E2B. Each tag is a record of the template store:
// name:default is recorded as name, name:tag as "name:tag", all pointing at
// the build (content hash) the tag names. So tags survive restarts with
// the templates and Sandbox.create('name:tag') resolves like any name.

const defaultTag = "default"

// validTag restricts tags to [A-Za-z0-9][A-Za-z0-9._-]{0,63}.
func validTag(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '-' || c == '_' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// parseTemplateRef splits name[:tag] and checks both parts.
func parseTemplateRef(ref string) (name, tag string, err error) {
	name, tag, hasTag := strings.Cut(ref, ":")
	if !validTemplateName(name) {
		return "", "", fmt.Errorf("invalid template name %q: want [a-z0-9][a-z0-9._-]* (at most 64 characters), optionally followed by :tag", name)
	}
	if hasTag && !validTag(tag) {
		return "", "", fmt.Errorf("invalid tag %q in %q: want [A-Za-z0-9][A-Za-z0-9._-]* (at most 64 characters)", tag, ref)
	}
	return name, tag, nil
}

// tag records to for the build from names.
func (a *api) tag(ctx context.Context, from, to string) (*TemplateInfo, error) {
	tg, ok := a.templates.(TemplateTagger)
	if !ok {
		return nil, &sdkUnsupported{}
	}
	return tg.Tag(ctx, from, to)
}

type sdkUnsupported struct{}

func (*sdkUnsupported) Error() string { return "this server cannot tag templates" }

// tagsOf returns the tags of template name, from the template records.
func (a *api) tagsOf(r *http.Request, name string) ([]TemplateInfo, []string, error) {
	ts, err := a.templates.List(r.Context())
	if err != nil {
		return nil, nil, err
	}
	var infos []TemplateInfo
	var tags []string
	for _, t := range ts {
		if n, tag := splitRecord(t.Name); n == name {
			infos, tags = append(infos, t), append(tags, tag)
		}
	}
	return infos, tags, nil
}

// templateTags answers GET /templates/{id}/tags (TemplateTag[]).
func (a *api) templateTags(w http.ResponseWriter, r *http.Request, id string) {
	name, _, _ := strings.Cut(id, ":")
	infos, tags, err := a.tagsOf(r, name)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if len(infos) == 0 {
		// A named snapshot (or anything else findTemplate knows) has its
		// one build under the default tag.
		t, ok := a.findTemplate(w, r, id)
		if !ok {
			return
		}
		infos, tags = []TemplateInfo{{Hash: t.BuildID, CreatedAt: t.CreatedAt}}, []string{defaultTag}
	}
	type tagJSON struct {
		Tag       string    `json:"tag"`
		BuildID   string    `json:"buildID"`
		CreatedAt time.Time `json:"createdAt"`
	}
	out := make([]tagJSON, len(infos))
	for i, t := range infos {
		out[i] = tagJSON{Tag: tags[i], BuildID: buildUUID(t.Hash), CreatedAt: t.CreatedAt.UTC()}
	}
	middleware.WriteJSON(w, http.StatusOK, out)
}

// assignTags answers POST /templates/tags (AssignTemplateTagsRequest →
// AssignedTemplateTags): the build target (name:tag) names gets tags.
func (a *api) assignTags(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Target string   `json:"target"`
		Tags   []string `json:"tags"`
	}
	if !decodeBody(w, r, &body, false) {
		return
	}
	name, tag, err := parseTemplateRef(body.Target)
	if err != nil {
		middleware.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !checkTags(w, body.Tags) {
		return
	}
	from := recordName(name, tag)
	var last *TemplateInfo
	for _, t := range body.Tags {
		if last, err = a.tag(r.Context(), from, recordName(name, t)); err != nil {
			if _, ok := err.(*sdkUnsupported); ok {
				middleware.WriteError(w, http.StatusNotImplemented, err.Error())
				return
			}
			a.fail(w, r, err)
			return
		}
	}
	middleware.WriteJSON(w, http.StatusCreated, map[string]any{"buildID": buildUUID(last.Hash), "tags": body.Tags})
}

// deleteTags answers DELETE /templates/tags (DeleteTemplateTagsRequest).
// A tag a running sandbox was created from is refused (409), as for
// templates.
func (a *api) deleteTags(w http.ResponseWriter, r *http.Request) {
	ad, ok := a.admin(w)
	if !ok {
		return
	}
	var body struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if !decodeBody(w, r, &body, false) {
		return
	}
	name, _, err := parseTemplateRef(body.Name)
	if err != nil {
		middleware.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !checkTags(w, body.Tags) {
		return
	}
	for _, t := range body.Tags {
		if err := ad.Remove(r.Context(), recordName(name, t)); err != nil {
			a.fail(w, r, err)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// refuseTagged refuses (409) deleting template name while other tags of
// it exist; it writes the response and reports whether it did.
func (a *api) refuseTagged(w http.ResponseWriter, r *http.Request, name string) bool {
	if strings.Contains(name, ":") {
		return false
	}
	_, tags, err := a.tagsOf(r, name)
	if err != nil {
		return false
	}
	tags = slices.DeleteFunc(tags, func(t string) bool { return t == defaultTag })
	slices.Sort(tags)
	if len(tags) == 0 {
		return false
	}
	middleware.WriteError(w, http.StatusConflict, fmt.Sprintf("template '%s' still has tags %s: remove them first (DELETE /templates/tags)", name, strings.Join(tags, ", ")))
	return true
}

// checkTags answers 400 and reports false unless tags is a non-empty list of
// valid tags.
func checkTags(w http.ResponseWriter, tags []string) bool {
	if len(tags) == 0 {
		middleware.WriteError(w, http.StatusBadRequest, "tags is required")
		return false
	}
	for _, t := range tags {
		if !validTag(t) {
			middleware.WriteError(w, http.StatusBadRequest, fmt.Sprintf("invalid tag %q: want [A-Za-z0-9][A-Za-z0-9._-]* (at most 64 characters)", t))
			return false
		}
	}
	return true
}
