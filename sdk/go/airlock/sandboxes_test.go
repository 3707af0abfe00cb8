package airlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

const testKey = "e2b_0123456789abcdef"

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"code": status, "message": msg})
}

// requireKey wraps h with the daemon's X-API-Key check.
func requireKey(t *testing.T, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("X-Api-Key"); got != testKey {
			writeErr(w, 401, "invalid API key")
			return
		}
		h(w, r)
	})
}

func TestCreateSandbox(t *testing.T) {
	var gotBody map[string]any
	srv := httptest.NewServer(requireKey(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v2/sandboxes" {
			writeErr(w, 404, "unexpected "+r.Method+" "+r.URL.Path)
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			writeErr(w, 400, "content type "+ct)
			return
		}
		json.NewDecoder(r.Body).Decode(&gotBody)
		writeJSON(w, 201, map[string]any{
			"sandboxID": "iabc123", "templateID": "base", "clientID": "6532622b",
			"envdVersion": "0.6.13", "envdAccessToken": "tok", "domain": nil,
		})
	}))
	defer srv.Close()

	no := false
	c := New(srv.URL+"/", testKey)
	sb, err := c.CreateSandbox(ctxT(t), SandboxOptions{
		Template: "base", Timeout: 60 * time.Second,
		Metadata: map[string]string{"a": "b"}, Envs: map[string]string{"X": "1"},
		AllowInternet: &no,
	})
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	want := SandboxInfo{SandboxID: "iabc123", TemplateID: "base", ClientID: "6532622b", EnvdVersion: "0.6.13", EnvdAccessToken: "tok"}
	if !reflect.DeepEqual(sb.Info, want) {
		t.Fatalf("sandbox = %+v, want %+v", sb.Info, want)
	}
	if sb.ID != "iabc123" || sb.TemplateID != "base" || sb.AccessToken != "tok" {
		t.Fatalf("handle = %+v", sb)
	}
	wantBody := map[string]any{
		"templateID": "base", "timeout": float64(60),
		"metadata": map[string]any{"a": "b"}, "envVars": map[string]any{"X": "1"},
		"allow_internet_access": false,
	}
	if !reflect.DeepEqual(gotBody, wantBody) {
		t.Fatalf("request body = %v, want %v", gotBody, wantBody)
	}

	// Omitted options are omitted on the wire, but for the SDK's defaults
	// (a code-interpreter sandbox for 5 minutes).
	gotBody = nil
	if _, err := c.CreateSandbox(ctxT(t), SandboxOptions{}); err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	if want := map[string]any{"templateID": "code-interpreter-v1", "timeout": float64(300)}; !reflect.DeepEqual(gotBody, want) {
		t.Fatalf("empty opts sent %v, want %v", gotBody, want)
	}

	// Wrong key → typed 401.
	_, err = New(srv.URL, "e2b_bad").CreateSandbox(ctxT(t), SandboxOptions{})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 401 || ae.Message != "invalid API key" {
		t.Fatalf("bad key: err = %#v, want APIError 401", err)
	}
}

func TestListSandboxesPaginationAndFilters(t *testing.T) {
	start := time.Date(2026, 11, 22, 1, 2, 3, 0, time.UTC)
	var queries []url.Values
	srv := httptest.NewServer(requireKey(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v2/sandboxes" {
			writeErr(w, 404, "nope")
			return
		}
		q := r.URL.Query()
		queries = append(queries, q)
		item := func(id string) map[string]any {
			return map[string]any{
				"templateID": "base", "sandboxID": id, "clientID": "6532622b",
				"startedAt": start.Format(time.RFC3339Nano), "endAt": start.Add(time.Minute).Format(time.RFC3339Nano),
				"cpuCount": 2, "memoryMB": 512, "diskSizeMB": 1024, "state": "running",
				"envdVersion": "0.6.13", "metadata": map[string]string{"team": "a b&c"},
			}
		}
		switch q.Get("nextToken") {
		case "":
			w.Header().Set("X-Next-Token", "page2")
			writeJSON(w, 200, []any{item("i1"), item("i2")})
		case "page2":
			writeJSON(w, 200, []any{item("i3")})
		default:
			writeErr(w, 400, "bad token")
		}
	}))
	defer srv.Close()
	c := New(srv.URL, testKey)

	opts := ListOpts{State: []string{"running", "paused"}, Metadata: map[string]string{"team": "a b&c", "k=": "v"}, Limit: 2}
	page, next, err := c.ListSandboxes(ctxT(t), opts)
	if err != nil {
		t.Fatalf("ListSandboxes: %v", err)
	}
	if len(page) != 2 || next != "page2" {
		t.Fatalf("page 1 = %d items, next %q", len(page), next)
	}
	if !page[0].StartedAt.Equal(start) || page[0].MemoryMB != 512 || page[0].Metadata["team"] != "a b&c" {
		t.Fatalf("decoded item = %+v", page[0])
	}
	q := queries[0]
	if q.Get("state") != "running,paused" || q.Get("limit") != "2" {
		t.Fatalf("query = %v", q)
	}
	// Server side of the metadata filter: unescape the decoded value once more.
	inner, err := url.ParseQuery(q.Get("metadata"))
	if err != nil || inner.Get("team") != "a b&c" || inner.Get("k=") != "v" {
		t.Fatalf("metadata filter decodes to %v (%v)", inner, err)
	}

	all, err := c.ListAllSandboxes(ctxT(t), opts)
	if err != nil {
		t.Fatalf("ListAllSandboxes: %v", err)
	}
	var ids []string
	for _, s := range all {
		ids = append(ids, s.SandboxID)
	}
	if strings.Join(ids, ",") != "i1,i2,i3" {
		t.Fatalf("all ids = %v", ids)
	}
}

func TestGetKillTimeout(t *testing.T) {
	var timeoutBody map[string]any
	killed := map[string]bool{}
	srv := httptest.NewServer(requireKey(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/sandboxes/ilive":
			writeJSON(w, 200, map[string]any{
				"templateID": "base", "sandboxID": "ilive", "clientID": "6532622b",
				"startedAt": "2026-11-22T01:02:03Z", "endAt": "2026-11-22T01:07:03Z",
				"cpuCount": 1, "memoryMB": 256, "diskSizeMB": 512, "state": "running",
				"envdVersion": "0.6.13", "envdAccessToken": "secret", "allowInternetAccess": true,
				"lifecycle": map[string]any{"onTimeout": "kill", "autoResume": false},
			})
		case r.Method == http.MethodDelete && r.URL.Path == "/sandboxes/ilive":
			killed["ilive"] = true
			w.WriteHeader(204)
		case r.Method == http.MethodPost && r.URL.Path == "/sandboxes/ilive/timeout":
			json.NewDecoder(r.Body).Decode(&timeoutBody)
			w.WriteHeader(204)
		case r.URL.Path == "/sandboxes/iempty":
			w.WriteHeader(503) // empty body
		default:
			writeErr(w, 404, "sandbox \""+strings.TrimPrefix(r.URL.Path, "/sandboxes/")+"\" not found")
		}
	}))
	defer srv.Close()
	c := New(srv.URL, testKey)
	ctx := ctxT(t)

	d, err := c.GetSandbox(ctx, "ilive")
	if err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	if d.SandboxID != "ilive" || d.EnvdAccessToken != "secret" || d.AllowInternetAccess == nil || !*d.AllowInternetAccess ||
		d.Lifecycle == nil || d.Lifecycle.OnTimeout != "kill" || d.EndAt.Sub(d.StartedAt) != 5*time.Minute {
		t.Fatalf("detail = %+v", d)
	}
	if err := c.KillSandbox(ctx, "ilive"); err != nil || !killed["ilive"] {
		t.Fatalf("KillSandbox: %v (killed=%v)", err, killed)
	}
	if err := c.SetTimeout(ctx, "ilive", 42); err != nil {
		t.Fatalf("SetTimeout: %v", err)
	}
	if timeoutBody["timeout"] != float64(42) {
		t.Fatalf("timeout body = %v", timeoutBody)
	}
	err = c.KillSandbox(ctx, "igone")
	if !IsNotFound(err) {
		t.Fatalf("KillSandbox(unknown) = %v, want 404", err)
	}
	var ae *APIError
	if !errors.As(err, &ae) || ae.Message != `sandbox "igone" not found` {
		t.Fatalf("APIError = %#v", ae)
	}
	_, err = c.GetSandbox(ctx, "iempty")
	if StatusOf(err) != 503 || !strings.Contains(err.Error(), "Service Unavailable") {
		t.Fatalf("empty-body error = %v", err)
	}
}

func TestTemplatesAndBuildStream(t *testing.T) {
	// step lets the test observe that progress is delivered while the
	// stream is still open (no buffering until the end).
	step := make(chan struct{})
	srv := httptest.NewServer(requireKey(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/templates":
			writeJSON(w, 200, []map[string]any{{
				"templateID": "base", "buildID": "h1", "aliases": []string{"base"},
				"createdAt": "2026-11-22T00:00:00Z", "updatedAt": "2026-11-22T00:00:00Z", "sizeBytes": 123,
			}})
		case r.Method == http.MethodPost && r.URL.Path == "/airlock/v1/templates/base/build":
			if r.URL.Query().Get("force") != "true" {
				writeErr(w, 409, "already built")
				return
			}
			w.Header().Set("Content-Type", "application/x-ndjson")
			fl := w.(http.Flusher)
			fmt.Fprintln(w, `{"phase":"bootstrap","message":"fetching packages","done":1,"total":3}`)
			fl.Flush()
			<-step
			fmt.Fprintln(w, `{"phase":"bootstrap","message":"unpacking","done":3,"total":3}`)
			fmt.Fprintln(w, ``)
			fmt.Fprintln(w, `{"done":true,"template":{"templateID":"base","buildID":"h2","sizeBytes":99}}`)
		case r.URL.Path == "/airlock/v1/templates/broken/build":
			fmt.Fprintln(w, `{"phase":"bootstrap","message":"x","done":0,"total":1}`)
			fmt.Fprintln(w, `{"error":"mmdebstrap exited 1"}`)
		case r.URL.Path == "/airlock/v1/templates/cut/build":
			fmt.Fprintln(w, `{"phase":"bootstrap","message":"x","done":0,"total":1}`)
		default:
			writeErr(w, 404, "no")
		}
	}))
	defer srv.Close()
	c := New(srv.URL, testKey)
	ctx := ctxT(t)

	ts, err := c.ListTemplates(ctx)
	if err != nil || len(ts) != 1 || ts[0].TemplateID != "base" || ts[0].SizeBytes != 123 || ts[0].Aliases[0] != "base" {
		t.Fatalf("ListTemplates = %+v, %v", ts, err)
	}

	var got []Progress
	tpl, err := c.BuildTemplate(ctx, "base", true, func(p Progress) {
		got = append(got, p)
		if len(got) == 1 {
			close(step) // only reachable if the first line arrived before the rest was written
		}
	})
	if err != nil {
		t.Fatalf("BuildTemplate: %v", err)
	}
	if tpl.BuildID != "h2" || tpl.SizeBytes != 99 {
		t.Fatalf("template = %+v", tpl)
	}
	want := []Progress{{"bootstrap", "fetching packages", 1, 3}, {"bootstrap", "unpacking", 3, 3}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("progress = %+v, want %+v", got, want)
	}

	if _, err := c.BuildTemplate(ctx, "base", false, nil); StatusOf(err) != 409 {
		t.Fatalf("non-forced build = %v, want 409", err)
	}
	_, err = c.BuildTemplate(ctx, "broken", false, nil)
	var be *BuildError
	if !errors.As(err, &be) || be.Message != "mmdebstrap exited 1" {
		t.Fatalf("broken build = %v, want BuildError", err)
	}
	if _, err := c.BuildTemplate(ctx, "cut", false, nil); err == nil || !strings.Contains(err.Error(), "stream ended") {
		t.Fatalf("truncated build = %v", err)
	}
}

func TestUploadDownload(t *testing.T) {
	files := map[string][]byte{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("E2b-Sandbox-Id") != "isb" || r.Header.Get("E2b-Sandbox-Port") != "49983" {
			writeJSON(w, 502, map[string]any{"sandboxId": r.Header.Get("E2b-Sandbox-Id"), "message": "sandbox not found", "code": 502})
			return
		}
		if r.Header.Get("X-Access-Token") != "tok" {
			writeErr(w, 401, "invalid access token")
			return
		}
		if r.Header.Get("X-Api-Key") != "" {
			writeErr(w, 400, "API key leaked to the agent")
			return
		}
		p := r.URL.Query().Get("path")
		switch r.Method {
		case http.MethodPost:
			if r.Header.Get("Content-Type") != "application/octet-stream" {
				writeErr(w, 400, "content type")
				return
			}
			b, _ := io.ReadAll(r.Body)
			files[p] = b
			writeJSON(w, 200, []map[string]string{{"path": p, "name": p[strings.LastIndex(p, "/")+1:], "type": "file"}})
		case http.MethodGet:
			b, ok := files[p]
			if !ok {
				writeErr(w, 404, "path '"+p+"' does not exist")
				return
			}
			w.Write(b)
		}
	}))
	defer srv.Close()
	c := New(srv.URL, testKey)
	ctx := ctxT(t)

	payload := strings.Repeat("airlock\x00\xff", 100000)
	wi, err := c.Upload(ctx, "isb", "tok", "/home/user/dir/a b.bin", strings.NewReader(payload))
	if err != nil || wi.Path != "/home/user/dir/a b.bin" || wi.Name != "a b.bin" || wi.Type != "file" {
		t.Fatalf("Upload = %+v, %v", wi, err)
	}
	rc, err := c.Download(ctx, "isb", "tok", "/home/user/dir/a b.bin")
	if err != nil {
		t.Fatalf("Download: %v", err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != payload {
		t.Fatalf("Download returned %d bytes (%v), want %d", len(b), err, len(payload))
	}
	if _, err := c.Download(ctx, "isb", "tok", "/missing"); !IsNotFound(err) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Download(missing) = %v", err)
	}
	if _, err := c.Download(ctx, "isb", "wrong", "/x"); StatusOf(err) != 401 {
		t.Fatalf("Download(bad token) = %v", err)
	}
	if _, err := c.Upload(ctx, "iother", "tok", "/x", strings.NewReader("")); StatusOf(err) != 502 {
		t.Fatalf("Upload(unknown sandbox) = %v, want 502", err)
	}
}

func TestUnreachableDaemon(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	_, err := New(url, testKey).GetSandbox(ctxT(t), "i1")
	if err == nil || !strings.Contains(err.Error(), "cannot reach the airlock daemon at "+url) {
		t.Fatalf("error = %v", err)
	}
}
