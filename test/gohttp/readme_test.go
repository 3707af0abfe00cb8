//go:build e2e

package gohttp

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readmeRow matches a row of README.md's API table: | `METHOD /path` | … |.
var readmeRow = regexp.MustCompile("^\\| `(GET|POST|PUT|PATCH|DELETE) (/[^`]*)` \\|")

// TestReadmeAPITable keeps README.md's feature list honest: every endpoint of
// its API table is called against the daemon (with a real sandbox, template
// and snapshot in place of {sandboxID}, {templateID} and {snapshotID}) and
// must answer something other than 404 (no such route) or 501 (not
// implemented). DELETE rows go last, the sandbox's own delete at the end.
func TestReadmeAPITable(t *testing.T) {
	e := loadEnv(t)
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ method, path string }
	var rows []row
	for line := range strings.Lines(string(raw)) {
		if m := readmeRow.FindStringSubmatch(line); m != nil {
			rows = append(rows, row{m[1], m[2]})
		}
	}
	if len(rows) < 20 {
		t.Fatalf("found %d rows in README.md's API table, want the whole table (20 or more): is the table's format `| `METHOD /path` | … |`?", len(rows))
	}
	slices.SortStableFunc(rows, func(a, b row) int {
		rank := func(r row) int {
			switch {
			case r.method != "DELETE":
				return 0
			case strings.HasPrefix(r.path, "/sandboxes/"):
				return 2
			}
			return 1
		}
		return rank(a) - rank(b)
	})

	tag := uniqueTag(t)
	md := map[string]string{"readme": tag}
	// Everything a row may create (a v1 or v2 create, fork children) is
	// killed at the end: every sandboxID in an answer.
	// Snapshots a row makes are deleted at the end too.
	made, snaps := map[string]bool{}, map[string]bool{}
	t.Cleanup(func() {
		for id := range made {
			e.kill(id)
		}
		for id := range snaps {
			e.api(t, "DELETE", "/templates/"+url.PathEscape(id), nil)
		}
	})
	collect := func(b []byte) {
		var walk func(v any)
		walk = func(v any) {
			switch x := v.(type) {
			case map[string]any:
				if id, ok := x["sandboxID"].(string); ok && id != "" {
					made[id] = true
				}
				if id, ok := x["snapshotID"].(string); ok && id != "" {
					snaps[id] = true
				}
				for _, c := range x {
					walk(c)
				}
			case []any:
				for _, c := range x {
					walk(c)
				}
			}
		}
		var v any
		if json.Unmarshal(b, &v) == nil {
			walk(v)
		}
	}

	cr := e.api(t, "POST", "/v2/sandboxes", map[string]any{"templateID": "base", "timeout": 300, "metadata": md})
	if cr.status != 201 {
		t.Fatalf("create: %d %s", cr.status, cr.body)
	}
	var sb sandboxInfo
	cr.json(t, &sb)
	made[sb.SandboxID] = true
	sr := e.api(t, "POST", "/sandboxes/"+sb.SandboxID+"/snapshots", map[string]any{"name": "readme-" + tag})
	if sr.status != 201 && sr.status != 200 {
		t.Fatalf("snapshot: %d %s", sr.status, sr.body)
	}
	var snap struct{ SnapshotID string }
	sr.json(t, &snap)
	snaps[snap.SnapshotID] = true

	vars := strings.NewReplacer("{sandboxID}", url.PathEscape(sb.SandboxID), "{templateID}", "base", "{snapshotID}", url.PathEscape(snap.SnapshotID))
	bodies := map[string]any{
		"POST /sandboxes":                        map[string]any{"templateID": "base", "timeout": 60, "metadata": md},
		"POST /v2/sandboxes":                     map[string]any{"templateID": "base", "timeout": 60, "metadata": md},
		"POST /sandboxes/{sandboxID}/timeout":    map[string]any{"timeout": 300},
		"POST /sandboxes/{sandboxID}/fork":       map[string]any{"count": 1, "timeout": 60},
		"POST /sandboxes/{sandboxID}/resume":     map[string]any{"timeout": 300},
		"POST /sandboxes/{sandboxID}/connect":    map[string]any{"timeout": 300},
		"POST /v2/sandboxes/{sandboxID}/connect": map[string]any{"timeout": 300},
		"POST /sandboxes/{sandboxID}/snapshots":  map[string]any{"name": "readme2-" + tag},
	}
	for _, r := range rows {
		path := vars.Replace(r.path)
		var body any
		if r.method == "POST" || r.method == "PUT" {
			body = bodies[r.method+" "+r.path]
			if body == nil {
				body = map[string]any{}
			}
		}
		if r.path == "/sandboxes/metrics" {
			path += "?sandbox_ids=" + url.QueryEscape(sb.SandboxID)
		}
		res := e.api(t, r.method, path, body)
		collect(res.body)
		t.Logf("%s %s: %d", r.method, r.path, res.status)
		if res.status == 404 || res.status == 501 {
			t.Errorf("README's %s %s answered %d: %s", r.method, r.path, res.status, res.body)
		}
		if res.status >= 500 {
			t.Errorf("README's %s %s answered %d (a server error): %s", r.method, r.path, res.status, res.body)
		}
	}
}
