package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// GET /templates lists one entry per template name, as E2B does, with its
// tags; the tag records (name:tag) are not entries of their own.
func TestListGroupsTagsIntoOneTemplate(t *testing.T) {
	srv, eng, _ := sdkHarness(t)
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	h := func(c string) string { return strings.Repeat(c, 64) }
	eng.recs["app:v1"] = TemplateInfo{Name: "app:v1", Hash: h("1"), CreatedAt: t0}
	eng.recs["app"] = TemplateInfo{Name: "app", Hash: h("2"), CreatedAt: t0.Add(time.Hour), SizeBytes: 42}
	eng.recs["app:stable"] = TemplateInfo{Name: "app:stable", Hash: h("2"), CreatedAt: t0.Add(2 * time.Hour)}
	eng.recs["lib:v1"] = TemplateInfo{Name: "lib:v1", Hash: h("3"), CreatedAt: t0}
	eng.recs["lib:v2"] = TemplateInfo{Name: "lib:v2", Hash: h("4"), CreatedAt: t0.Add(time.Hour)}

	req, _ := http.NewRequest("GET", srv.URL+"/templates", nil)
	req.Header.Set("X-API-Key", "k")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var list []templateJSON
	if err := json.Unmarshal(raw, &list); err != nil || res.StatusCode != 200 {
		t.Fatalf("GET /templates: %d %s", res.StatusCode, raw)
	}
	byID := map[string]templateJSON{}
	for _, tj := range list {
		if _, dup := byID[tj.TemplateID]; dup {
			t.Fatalf("template %s listed twice: %s", tj.TemplateID, raw)
		}
		byID[tj.TemplateID] = tj
	}
	if len(list) != 3 {
		t.Fatalf("want 3 entries (app, lib, base), got %d: %s", len(list), raw)
	}
	app := byID["app"]
	if fmt.Sprint(app.Tags) != "[default stable v1]" || fmt.Sprint(app.Aliases) != "[app]" || fmt.Sprint(app.Names) != "[app]" ||
		app.BuildID != h("2") || app.SizeBytes != 42 || app.BuildCount != 2 || !app.CreatedAt.Equal(t0) {
		t.Errorf("app = %+v", app)
	}
	// No default tag: the newest tag's build stands for the template.
	lib := byID["lib"]
	if fmt.Sprint(lib.Tags) != "[v1 v2]" || lib.BuildID != h("4") || fmt.Sprint(lib.Names) != "[lib]" {
		t.Errorf("lib = %+v", lib)
	}
	if fmt.Sprint(byID["base"].Tags) != "[default]" {
		t.Errorf("base = %+v", byID["base"])
	}

	// GET /templates/{id} knows the template by name and by an existing tag.
	for _, ref := range []string{"app", "app:v1", "app:default", "lib:v2"} {
		if st, resp := call(t, srv, "GET", "/templates/"+ref, nil); st != 200 || resp["templateID"] != strings.Split(ref, ":")[0] {
			t.Errorf("GET /templates/%s: %d %v", ref, st, resp)
		}
	}
	if st, resp := call(t, srv, "GET", "/templates/lib:default", nil); st != 404 || !strings.Contains(fmt.Sprint(resp["message"]), "tag 'default' does not exist for template 'lib'") {
		t.Errorf("GET /templates/lib:default: %d %v", st, resp)
	}
}

// GET /templates/aliases/{alias} (Template.exists): a bare name exists when
// any tag of it does; name:tag only when that tag does.
func TestAliasExistsPerTag(t *testing.T) {
	srv, eng, _ := sdkHarness(t)
	eng.recs["app"] = TemplateInfo{Name: "app", Hash: strings.Repeat("2", 64)}
	eng.recs["app:v1"] = TemplateInfo{Name: "app:v1", Hash: strings.Repeat("1", 64)}
	eng.recs["lib:v1"] = TemplateInfo{Name: "lib:v1", Hash: strings.Repeat("3", 64)}
	for ref, want := range map[string]int{
		"app": 200, "app:v1": 200, "app:default": 200, "app:v2": 404,
		"lib": 200, "lib:v1": 200, "lib:default": 404, "lib:v9": 404,
		"base": 200, "base:v1": 404, "nope": 404, "nope:v1": 404,
	} {
		st, resp := call(t, srv, "GET", "/templates/aliases/"+strings.ReplaceAll(ref, ":", "%3A"), nil)
		if st != want {
			t.Errorf("alias %s: %d %v, want %d", ref, st, resp, want)
			continue
		}
		if st == 200 && resp["templateID"] != strings.Split(ref, ":")[0] {
			t.Errorf("alias %s: %v", ref, resp)
		}
		if ref == "app:v2" && !strings.Contains(fmt.Sprint(resp["message"]), "tag 'v2' does not exist for template 'app'") {
			t.Errorf("alias %s: %v", ref, resp)
		}
	}
}
