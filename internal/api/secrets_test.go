package api_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/secretbox"
	"github.com/airlock-sandbox/airlock/internal/secrets"
	"github.com/airlock-sandbox/airlock/internal/store/sqlite"
)

// secretsHarness serves /secrets from a SQLite store; it returns the
// service too, to resolve values as the egress proxy does.
func secretsHarness(t *testing.T) (*harness, *secrets.Service, string) {
	t.Helper()
	dbPath := filepath.Join(t.TempDir(), "airlock.db")
	db, err := sqlite.Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	box, err := secretbox.New(bytes.Repeat([]byte{7}, secretbox.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	svc := &secrets.Service{Store: db, Box: box}
	env := sandboxtest.NewEnv(t, nil)
	opts := api.Options{APIKey: testKey, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Secrets: svc}
	srv := httptest.NewServer(api.New(env.Manager, &fakeTemplates{}, opts))
	t.Cleanup(srv.Close)
	return &harness{env: env, srv: srv}, svc, dbPath
}

type secretJSON struct {
	SecretID       string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int64             `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      string            `json:"createdAt"`
	UpdatedAt      string            `json:"updatedAt"`
}

func TestSecretsCRUD(t *testing.T) {
	h, svc, dbPath := secretsHarness(t)
	const value = "ghp_s3cr3t-VALUE-never-returned"
	st, hdr, data := h.do(t, "POST", "/secrets", `{"name":"GH-Token","value":"`+value+`","metadata":{"team":"a"}}`)
	if st != http.StatusCreated || hdr.Get("Cache-Control") != "no-store" {
		t.Fatalf("create = %d %q %s", st, hdr.Get("Cache-Control"), data)
	}
	if bytes.Contains(data, []byte(value)) {
		t.Fatalf("create response holds the value: %s", data)
	}
	s := decode[secretJSON](t, data)
	if !strings.HasPrefix(s.SecretID, "sec_") || s.Name != "gh-token" || s.CurrentVersion != 1 || s.Metadata["team"] != "a" || s.CreatedAt == "" {
		t.Fatalf("created %+v", s)
	}
	for _, p := range []string{"/secrets/" + s.SecretID, "/secrets/gh-token", "/secrets/GH-TOKEN"} {
		st, hdr, data := h.do(t, "GET", p, "")
		if st != 200 || hdr.Get("Cache-Control") != "no-store" || decode[secretJSON](t, data).SecretID != s.SecretID || bytes.Contains(data, []byte(value)) {
			t.Fatalf("GET %s = %d %q %s", p, st, hdr.Get("Cache-Control"), data)
		}
	}
	if got, err := svc.Resolve(t.Context(), "gh-token"); err != nil || string(got) != value {
		t.Fatalf("Resolve = %q, %v", got, err)
	}
	// Update: a new version, the new value, metadata kept when omitted.
	st, _, data = h.do(t, "POST", "/secrets/"+s.SecretID, `{"value":"v2"}`)
	if u := decode[secretJSON](t, data); st != 200 || u.CurrentVersion != 2 || u.Metadata["team"] != "a" {
		t.Fatalf("update = %d %s", st, data)
	}
	if got, err := svc.Resolve(t.Context(), "GH-token"); err != nil || string(got) != "v2" {
		t.Fatalf("Resolve after update = %q, %v", got, err)
	}
	// At rest the value is sealed: not in the database file.
	h.do(t, "POST", "/secrets", `{"name":"plain","value":"`+value+`"}`)
	if raw, err := readAll(dbPath); err != nil || bytes.Contains(raw, []byte(value)) {
		t.Fatalf("the database holds the value in the clear (err %v)", err)
	}
	if st, _, data := h.do(t, "POST", "/secrets", `{"name":"gh-TOKEN","value":"x"}`); st != http.StatusConflict {
		t.Fatalf("duplicate = %d %s", st, data)
	}
	if st, hdr, _ := h.do(t, "DELETE", "/secrets/"+s.SecretID, ""); st != 204 || hdr.Get("Cache-Control") != "no-store" {
		t.Fatalf("delete = %d", st)
	}
	for _, c := range [][2]string{{"GET", "/secrets/gh-token"}, {"DELETE", "/secrets/" + s.SecretID}} {
		if st, _, data := h.do(t, c[0], c[1], ""); st != 404 {
			t.Fatalf("%s %s after delete = %d %s", c[0], c[1], st, data)
		}
	}
	if st, _, data := h.do(t, "POST", "/secrets/"+s.SecretID, `{"value":"x"}`); st != 404 {
		t.Fatalf("update of deleted = %d %s", st, data)
	}
}

// readAll reads a SQLite database and its write-ahead log.
func readAll(p string) ([]byte, error) {
	out, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	if wal, err := os.ReadFile(p + "-wal"); err == nil {
		out = append(out, wal...)
	}
	return out, nil
}

func TestSecretsValidation(t *testing.T) {
	h, _, _ := secretsHarness(t)
	long := strings.Repeat("a", 129)
	for _, body := range []string{
		`{"name":"","value":"x"}`,
		`{"name":"` + long + `","value":"x"}`,
		`{"name":"a b","value":"x"}`,
		`{"name":"a.b","value":"x"}`,
		`{"name":"sec_abc","value":"x"}`,
		`{"name":"SEC_abc","value":"x"}`,
		`{"name":"ok"}`,
		`{"name":"ok","value":""}`,
		`{"name":"ok","value":"` + strings.Repeat("v", 64<<10+1) + `"}`,
		`{"name":"ok","value":"x","metadata":{"` + strings.Repeat("k", 129) + `":"v"}}`,
		`{"name":"ok","value":"x","metadata":{"k":"` + strings.Repeat("v", 1025) + `"}}`,
		`{"name":"ok","value":"x","metadata":` + manyMeta(33) + `}`,
		`{"name":"ok","value":"x","metadata":` + bigMeta() + `}`,
	} {
		st, hdr, data := h.do(t, "POST", "/secrets", body)
		if st != http.StatusBadRequest || hdr.Get("Cache-Control") != "no-store" {
			short := body
			if len(short) > 80 {
				short = short[:80]
			}
			t.Errorf("POST /secrets %s = %d %s", short, st, data)
		}
	}
	// The largest value and a 128-character name pass; a body over
	// 512 KiB is refused.
	if st, _, data := h.do(t, "POST", "/secrets", `{"name":"`+long[:128]+`","value":"`+strings.Repeat("v", 64<<10)+`"}`); st != 201 {
		t.Fatalf("limits = %d %s", st, data)
	}
	if st, _, _ := h.do(t, "POST", "/secrets", `{"name":"big","value":"x","pad":"`+strings.Repeat("p", 512<<10)+`"}`); st != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body = %d", st)
	}
}

func manyMeta(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, fmt.Sprintf(`"k%d":"v"`, i))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func bigMeta() string {
	var parts []string
	for i := range 9 {
		parts = append(parts, fmt.Sprintf(`"k%d":"%s"`, i, strings.Repeat("v", 1000)))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func TestSecretsList(t *testing.T) {
	h, _, _ := secretsHarness(t)
	for i := range 5 {
		if st, _, data := h.do(t, "POST", "/secrets", fmt.Sprintf(`{"name":"s%d","value":"v"}`, i)); st != 201 {
			t.Fatalf("create = %d %s", st, data)
		}
	}
	var names []string
	tok := ""
	for pages := 0; ; pages++ {
		p := "/secrets?limit=2"
		if tok != "" {
			p += "&nextToken=" + tok
		}
		st, hdr, data := h.do(t, "GET", p, "")
		if st != 200 || hdr.Get("Cache-Control") != "no-store" {
			t.Fatalf("GET %s = %d %s", p, st, data)
		}
		for _, s := range decode[[]secretJSON](t, data) {
			names = append(names, s.Name)
		}
		if tok = hdr.Get("X-Next-Token"); tok == "" || pages > 5 {
			break
		}
	}
	if got := strings.Join(names, ","); got != "s0,s1,s2,s3,s4" {
		t.Fatalf("pages = %s", got)
	}
	for _, q := range []string{"limit=0", "limit=101", "nextToken=%21%21"} {
		if st, _, _ := h.do(t, "GET", "/secrets?"+q, ""); st != 400 {
			t.Errorf("GET /secrets?%s = %d", q, st)
		}
	}
}

func TestSecretsOff(t *testing.T) {
	h := newHarness(t, api.Options{APIKey: testKey})
	if st, hdr, _ := h.do(t, "GET", "/secrets", ""); st != http.StatusForbidden || hdr.Get("Cache-Control") != "no-store" {
		t.Fatalf("GET /secrets without a backend = %d", st)
	}
}

func TestNetworkRulesChecked(t *testing.T) {
	h, _, _ := secretsHarness(t)
	if st, _, data := h.do(t, "POST", "/secrets", `{"name":"gh","value":"v"}`); st != 201 {
		t.Fatalf("create secret = %d %s", st, data)
	}
	rule := func(v string) string {
		return `{"network":{"rules":{"api.github.com":[{"transform":{"headers":{"Authorization":"` + v + `"}}}]}}}`
	}
	st, _, body := h.do(t, "POST", "/v2/sandboxes", rule("Bearer ${e2b.secrets.nope}"))
	assertError(t, st, body, 400, "Network transform rules reference unknown secrets: nope")
	st, _, body = h.do(t, "POST", "/v2/sandboxes", rule("Bearer ${e2b.secrets.gh"))
	assertError(t, st, body, 400, "Network transform header contains a malformed E2B placeholder.")
	st, _, body = h.do(t, "POST", "/v2/sandboxes", `{"network":{"rules":{"*.github.com":[]}}}`)
	assertError(t, st, body, 400, "not a valid domain name")
	// Valid rules naming an existing secret (case-insensitively) pass the
	// checks: enforced by the egress proxy (test/gohttp's TestSecretsProxy).
	if st, _, body = h.do(t, "POST", "/v2/sandboxes", rule("Bearer ${e2b.secrets.GH}")); st == 400 || st == 501 {
		t.Fatalf("valid rules = %d %s", st, body)
	}
	st, _, body = h.do(t, "POST", "/v2/sandboxes", `{"network":{"egressProxy":{"address":"p:1080"}}}`)
	assertError(t, st, body, 400, "Invalid egress proxy config: ")
	// updateNetwork checks them the same way.
	st, _, body = h.do(t, "PUT", "/sandboxes/any/network", `{"rules":{"api.github.com":[{"transform":{"headers":{"X":"${e2b.secrets.nope}"}}}]}}`)
	assertError(t, st, body, 400, "unknown secrets: nope")
}
