//go:build e2e

package gohttp

// E2B's /secrets (issue 29) against the daemon: the lifecycle of a secret,
// its value never in a response nor in the clear in the data dir, the key
// file 0600, and network.rules naming secrets checked at create.

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSecretsAPI(t *testing.T) {
	e := loadEnv(t)
	name := "e2e-" + uniqueTag(t)
	value := "airlock-e2e-secret-" + uniqueTag(t) + "-VALUE"
	r := e.api(t, "POST", "/secrets", map[string]any{"name": strings.ToUpper(name), "value": value, "metadata": map[string]string{"k": "v"}})
	if r.status != 201 || r.header.Get("Cache-Control") != "no-store" || bytes.Contains(r.body, []byte(value)) {
		t.Fatalf("create = %d %q %s", r.status, r.header.Get("Cache-Control"), r.body)
	}
	var s struct {
		SecretID       string            `json:"secretID"`
		Name           string            `json:"name"`
		CurrentVersion int64             `json:"currentVersion"`
		Metadata       map[string]string `json:"metadata"`
	}
	r.json(t, &s)
	t.Cleanup(func() { e.api(t, "DELETE", "/secrets/"+s.SecretID, nil) })
	if !strings.HasPrefix(s.SecretID, "sec_") || s.Name != name || s.CurrentVersion != 1 || s.Metadata["k"] != "v" {
		t.Fatalf("created %+v", s)
	}
	for _, p := range []string{"/secrets/" + s.SecretID, "/secrets/" + name, "/secrets?limit=100"} {
		r := e.api(t, "GET", p, nil)
		if r.status != 200 || r.header.Get("Cache-Control") != "no-store" || !bytes.Contains(r.body, []byte(s.SecretID)) || bytes.Contains(r.body, []byte(value)) {
			t.Fatalf("GET %s = %d %s", p, r.status, r.body)
		}
	}
	r = e.api(t, "POST", "/secrets/"+s.SecretID, map[string]any{"value": value + "-2"})
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"currentVersion":2`)) {
		t.Fatalf("update = %d %s", r.status, r.body)
	}
	// Rules naming it pass the checks; naming another secret is a 400.
	r = e.api(t, "POST", "/v2/sandboxes", `{"network":{"rules":{"api.example.com":[{"transform":{"headers":{"X":"${e2b.secrets.`+name+`-missing}"}}}]}}}`)
	errorBody(t, r, 400)
	if !bytes.Contains(r.body, []byte("unknown secrets")) {
		t.Fatalf("unknown secret at create: %s", r.body)
	}
	// At rest: nowhere in the data dir in the clear; the key file 0600.
	if dir := os.Getenv("AIRLOCK_E2E_DATA_DIR"); dir != "" {
		if fi, err := os.Stat(filepath.Join(dir, "secrets.key")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("secrets.key: %v %v", fi, err)
		}
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasPrefix(d.Name(), "airlock.db") {
				return nil
			}
			if raw, err := os.ReadFile(p); err == nil && bytes.Contains(raw, []byte(value)) {
				t.Errorf("%s holds the secret's value in the clear", p)
			}
			return nil
		})
	}
	if r := e.api(t, "DELETE", "/secrets/"+name, nil); r.status != 204 {
		t.Fatalf("delete by name = %d %s", r.status, r.body)
	}
	if r := e.api(t, "GET", "/secrets/"+s.SecretID, nil); r.status != 404 {
		t.Fatalf("get after delete = %d %s", r.status, r.body)
	}
}
