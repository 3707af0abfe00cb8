package api

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// fakeEngine stands in for the template manager and the Dockerfile
// builder: it records what it was asked to build.
type fakeEngine struct {
	mu         sync.Mutex
	recs       map[string]TemplateInfo
	dockerfile string
	files      []string
	// block, when set, holds BuildDockerfile until it is closed.
	block chan struct{}
}

func (f *fakeEngine) List(context.Context) ([]TemplateInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []TemplateInfo
	for _, r := range f.recs {
		out = append(out, r)
	}
	return out, nil
}

func (f *fakeEngine) Build(context.Context, string, bool, func(airlock.Progress)) (*TemplateInfo, error) {
	return nil, errors.New("not used")
}

func (f *fakeEngine) BuildDockerfile(_ context.Context, name string, r io.Reader, o airlock.DockerfileBuild, progress func(airlock.Progress)) (*TemplateInfo, error) {
	if f.block != nil {
		<-f.block
	}
	tr := tar.NewReader(r)
	var df string
	var files []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		b, _ := io.ReadAll(tr)
		if h.Name == o.Dockerfile {
			df = string(b)
		} else {
			files = append(files, h.Name)
		}
	}
	lines := strings.Split(strings.TrimSpace(df), "\n")
	for i, l := range lines[1:] {
		n := i + 2
		progress(airlock.Progress{Phase: "step", Message: fmt.Sprintf("[%d/%d] %s", n, len(lines), l), Done: int64(n), Total: int64(len(lines))})
		if strings.Contains(l, "exit 3") {
			progress(airlock.Progress{Phase: "output", Message: "about to fail", Done: int64(n), Total: int64(len(lines))})
			return nil, &sandbox.Error{Code: 400, Msg: fmt.Sprintf("Dockerfile line %d (%s): the command returned a non-zero code: 3", n, l)}
		}
		progress(airlock.Progress{Phase: "cached", Message: fmt.Sprintf("[%d/%d] CACHED", n, len(lines)), Done: int64(n), Total: int64(len(lines))})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dockerfile, f.files = df, files
	t := TemplateInfo{Name: name, Hash: strings.Repeat("c", 64), CreatedAt: time.Now()}
	f.recs[name] = t
	return &t, nil
}

func (f *fakeEngine) Info(_ context.Context, name string) (*TemplateInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.recs[name]
	if !ok {
		return nil, &sandbox.Error{Code: 404, Msg: "not found"}
	}
	return &t, nil
}

func (f *fakeEngine) Remove(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.recs, name)
	return nil
}

func (f *fakeEngine) Tag(_ context.Context, from, to string) (*TemplateInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.recs[from]
	if !ok {
		return nil, &sandbox.Error{Code: 404, Msg: "template '" + from + "' not found"}
	}
	t.Name = to
	f.recs[to] = t
	return &t, nil
}

type memBuilds struct {
	mu    sync.Mutex
	m     map[string]store.TemplateBuild
	files *FileSets
}

func (s *memBuilds) PutTemplateBuild(_ context.Context, b *store.TemplateBuild) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[b.ID] = *b
	return nil
}

func (s *memBuilds) GetTemplateBuild(_ context.Context, id string) (*store.TemplateBuild, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[id]
	if !ok {
		return nil, store.ErrNotFound
	}
	return &b, nil
}

func (s *memBuilds) Files() *FileSets { return s.files }

func (s *memBuilds) ListTemplateBuilds(_ context.Context, id string, limit int) ([]*store.TemplateBuild, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*store.TemplateBuild
	for _, b := range s.m {
		if b.TemplateID == id {
			b.Logs = ""
			out = append(out, &b)
		}
	}
	slices.SortFunc(out, func(x, y *store.TemplateBuild) int { return y.CreatedAt.Compare(x.CreatedAt) })
	return out[:min(limit, len(out))], nil
}

func sdkHarness(t *testing.T) (*httptest.Server, *fakeEngine, *memBuilds) {
	eng := &fakeEngine{recs: map[string]TemplateInfo{"base": {Name: "base", Hash: strings.Repeat("b", 64)}}}
	bs := &memBuilds{m: map[string]store.TemplateBuild{}, files: NewFileSets(t.TempDir())}
	env := sandboxtest.NewEnv(t, nil)
	srv := httptest.NewServer(New(env.Manager, eng, Options{APIKey: "k", TemplateBuilds: bs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)
	return srv, eng, bs
}

func call(t *testing.T, srv *httptest.Server, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, _ := json.Marshal(b)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, srv.URL+path, rd)
	req.Header.Set("X-API-Key", "k")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	return res.StatusCode, m
}

func TestSDKBuildFlow(t *testing.T) {
	srv, eng, _ := sdkHarness(t)
	st, resp := call(t, srv, "POST", "/v3/templates", map[string]any{"name": "app:v1", "tags": []string{"stable"}})
	if st != 202 || resp["templateID"] != "app" || fmt.Sprint(resp["tags"]) != "[v1 stable]" {
		t.Fatalf("v3: %d %v", st, resp)
	}
	buildID := resp["buildID"].(string)

	// Upload a gzip tar of app/index.html.
	var tb bytes.Buffer
	zw := gzip.NewWriter(&tb)
	tw := tar.NewWriter(zw)
	_ = tw.WriteHeader(&tar.Header{Name: "app/", Mode: 0o755, Typeflag: tar.TypeDir})
	_ = tw.WriteHeader(&tar.Header{Name: "app/index.html", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("hi"))
	_ = tw.Close()
	_ = zw.Close()
	hash := strings.Repeat("d", 64)
	st, resp = call(t, srv, "GET", "/templates/app/files/"+hash, nil)
	upURL := fmt.Sprint(resp["url"])
	if st != 201 || resp["present"] != false || !strings.Contains(upURL, "/airlock/v1/template-files/"+hash+"?expires=") {
		t.Fatalf("files: %d %v", st, resp)
	}
	put := func(u string) int {
		req, _ := http.NewRequest("PUT", u, bytes.NewReader(tb.Bytes()))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	// The signature is good for this hash only, and without an API key.
	if st := put(strings.Replace(upURL, hash, strings.Repeat("e", 64), 1)); st != 401 {
		t.Fatalf("upload to another hash with this URL: %d", st)
	}
	if st := put(upURL + "0"); st != 401 {
		t.Fatalf("upload with a bad signature: %d", st)
	}
	if st := put(upURL); st != 200 {
		t.Fatalf("upload: %d", st)
	}
	if st, resp = call(t, srv, "GET", "/templates/app/files/"+hash, nil); st != 201 || resp["present"] != true {
		t.Fatalf("files after upload: %d %v", st, resp)
	}
	spec := map[string]any{"fromTemplate": "base", "startCmd": "serve", "steps": []map[string]any{
		{"type": "COPY", "args": []string{"app/", "/app/"}, "filesHash": hash},
		{"type": "RUN", "args": []string{"make"}},
	}}
	if st, resp = call(t, srv, "POST", "/v2/templates/app/builds/"+buildID, spec); st != 202 {
		t.Fatalf("start: %d %v", st, resp)
	}
	var status map[string]any
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		_, status = call(t, srv, "GET", "/templates/app/builds/"+buildID+"/status?logsOffset=0", nil)
		if status["status"] == "ready" || status["status"] == "error" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if status["status"] != "ready" {
		t.Fatalf("status: %v", status)
	}
	var msgs []string
	for _, e := range status["logEntries"].([]any) {
		msgs = append(msgs, e.(map[string]any)["message"].(string))
	}
	log := strings.Join(msgs, "\n")
	for _, want := range []string{"[1/2] COPY app/ /app/", "[1/2] CACHED COPY app/ /app/", "[2/2] RUN make", "built (tags v1, stable)"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if !strings.Contains(eng.dockerfile, `COPY --chown=user [".e2b/files/`+hash+`/app/","/app/"]`) {
		t.Errorf("Dockerfile:\n%s", eng.dockerfile)
	}
	if fmt.Sprint(eng.files) != "[.e2b/files/"+hash+"/ .e2b/files/"+hash+"/app/ .e2b/files/"+hash+"/app/index.html]" {
		t.Errorf("context files: %v", eng.files)
	}
	if _, ok := eng.recs["app:v1"]; !ok {
		t.Errorf("no record app:v1: %v", eng.recs)
	}
	if _, ok := eng.recs["app:stable"]; !ok {
		t.Errorf("no record app:stable: %v", eng.recs)
	}
	// The offset pages the log.
	_, page := call(t, srv, "GET", "/templates/app/builds/"+buildID+"/status?logsOffset=2", nil)
	if got := len(page["logEntries"].([]any)); got != len(msgs)-2 {
		t.Errorf("logsOffset=2 gave %d entries of %d", got, len(msgs))
	}
	// GET /templates/{id} lists the SDK builds with their status and tags.
	st, tpl := call(t, srv, "GET", "/templates/app", nil)
	builds, _ := tpl["builds"].([]any)
	if st != 200 || len(builds) != 1 {
		t.Fatalf("GET /templates/app: %d %v", st, tpl)
	}
	b0 := builds[0].(map[string]any)
	if b0["buildID"] != buildID || b0["status"] != "ready" || fmt.Sprint(b0["tags"]) != "[v1 stable]" || b0["finishedAt"] == nil {
		t.Errorf("build: %v", b0)
	}
	// Tagged: the bare name may not be deleted while tags exist.
	def := eng.recs["app:v1"]
	def.Name = "app"
	eng.recs["app"] = def
	if st, resp = call(t, srv, "DELETE", "/templates/app", nil); st != 409 || !strings.Contains(fmt.Sprint(resp["message"]), "still has tags stable, v1") {
		t.Errorf("delete tagged: %d %v", st, resp)
	}
}

func TestSDKBuildFailureNamesStep(t *testing.T) {
	srv, _, _ := sdkHarness(t)
	_, resp := call(t, srv, "POST", "/v3/templates", map[string]any{"name": "bad"})
	id := resp["buildID"].(string)
	spec := map[string]any{"fromImage": "e2bdev/base", "steps": []map[string]any{
		{"type": "ENV", "args": []string{"A", "1"}},
		{"type": "RUN", "args": []string{"exit 3"}},
	}}
	if st, resp := call(t, srv, "POST", "/v2/templates/bad/builds/"+id, spec); st != 202 {
		t.Fatalf("start: %d %v", st, resp)
	}
	var status map[string]any
	for i := 0; i < 500; i++ {
		_, status = call(t, srv, "GET", "/templates/bad/builds/"+id+"/status", nil)
		if status["status"] == "error" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	reason, _ := status["reason"].(map[string]any)
	if status["status"] != "error" || reason["step"] != "2" || !strings.HasPrefix(fmt.Sprint(reason["message"]), "step 2 (RUN exit 3): the command returned a non-zero code: 3") {
		t.Fatalf("status: %v", status)
	}
}

func TestSDKBuildInterruptedByRestart(t *testing.T) {
	srv, _, bs := sdkHarness(t)
	now := time.Now()
	_ = bs.PutTemplateBuild(context.Background(), &store.TemplateBuild{ID: "b1", TemplateID: "app", Status: "building", CreatedAt: now, UpdatedAt: now, Spec: `{"name":"app","tags":["default"]}`})
	_, status := call(t, srv, "GET", "/templates/app/builds/b1/status", nil)
	reason, _ := status["reason"].(map[string]any)
	if status["status"] != "error" || !strings.Contains(fmt.Sprint(reason["message"]), "interrupted") {
		t.Fatalf("status: %v", status)
	}
	if b, _ := bs.GetTemplateBuild(context.Background(), "b1"); b.Status != "error" {
		t.Fatalf("stored status %s", b.Status)
	}
	if st, resp := call(t, srv, "GET", "/templates/other/builds/b1/status", nil); st != 400 || !strings.Contains(fmt.Sprint(resp["message"]), "does not belong to template") {
		t.Fatalf("foreign build: %d %v", st, resp)
	}
}

// A status read while a build runs but before its first log entry (the
// goroutine not yet scheduled), and one of a stored build without a log,
// say "logEntries": [] — the SDK maps the array, and null threw
// "Cannot read properties of null (reading 'map')" in its build poll.
func TestBuildLogsNeverNull(t *testing.T) {
	a := &api{}
	a.sdk.set("b-running", &runningBuild{})
	for _, b := range []*store.TemplateBuild{{ID: "b-running", Status: "building"}, {ID: "b-stored", Status: "ready"}} {
		logs := a.buildLogs(b)
		out, err := json.Marshal(map[string]any{"logEntries": logs[0:]})
		if err != nil || string(out) != `{"logEntries":[]}` {
			t.Errorf("%s: logEntries = %s, %v; want []", b.ID, out, err)
		}
	}
}
