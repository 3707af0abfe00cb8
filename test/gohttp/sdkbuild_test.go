//go:build e2e

package gohttp

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// E2B's template build API (v3) driven with raw HTTP, as the Python SDK
// does: bad input, a build from an OCI image on a loopback registry, and a
// daemon killed during a build.

type v3Build struct {
	TemplateID string   `json:"templateID"`
	BuildID    string   `json:"buildID"`
	Names      []string `json:"names"`
	Tags       []string `json:"tags"`
}

func (e env) requestV3(t *testing.T, ref string, tags []string) v3Build {
	t.Helper()
	r := e.api(t, http.MethodPost, "/v3/templates", map[string]any{"name": ref, "tags": tags, "cpuCount": 1, "memoryMB": 512})
	if r.status != http.StatusAccepted {
		t.Fatalf("POST /v3/templates %s: %d %s", ref, r.status, r.body)
	}
	var b v3Build
	r.json(t, &b)
	return b
}

type buildInfo struct {
	Status     string `json:"status"`
	LogEntries []struct {
		Message string `json:"message"`
		Step    string `json:"step"`
	} `json:"logEntries"`
	Reason *struct {
		Message string `json:"message"`
		Step    string `json:"step"`
	} `json:"reason"`
}

func (e env) buildStatus(t *testing.T, b v3Build) buildInfo {
	t.Helper()
	r := e.api(t, http.MethodGet, "/templates/"+b.TemplateID+"/builds/"+b.BuildID+"/status", nil)
	if r.status != http.StatusOK {
		t.Fatalf("build status: %d %s", r.status, r.body)
	}
	var bi buildInfo
	r.json(t, &bi)
	return bi
}

func (e env) waitBuild(t *testing.T, b v3Build) (buildInfo, string) {
	t.Helper()
	var bi buildInfo
	var logs []string
	if !waitFor(5*time.Minute, 300*time.Millisecond, func() bool {
		bi = e.buildStatus(t, b)
		for _, l := range bi.LogEntries {
			logs = append(logs, l.Message)
		}
		return bi.Status == "ready" || bi.Status == "error"
	}) {
		t.Fatalf("build %s still %s after 5 minutes", b.BuildID, bi.Status)
	}
	return bi, strings.Join(logs, "\n")
}

// uploadFiles gets the upload link of a tar.gz of files and PUTs it there.
func (e env) uploadFiles(t *testing.T, templateID string, files map[string]string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for n, c := range files {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(c)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte(c))
	}
	_ = tw.Close()
	_ = zw.Close()
	sum := sha256.Sum256(buf.Bytes())
	hash := hex.EncodeToString(sum[:])
	r := e.api(t, http.MethodGet, "/templates/"+templateID+"/files/"+hash, nil)
	var link struct {
		Present bool              `json:"present"`
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
	}
	r.json(t, &link)
	// 201 as E2B answers: the Python SDK's generated client accepts no other.
	if r.status != http.StatusCreated || link.Present || link.URL == "" {
		t.Fatalf("upload link: %d %s", r.status, r.body)
	}
	// The URL is signed for this hash: no API key needed, no other hash.
	other := strings.Replace(link.URL, hash, strings.Repeat("0", 64), 1)
	if res, err := http.DefaultClient.Do(mustRequest(t, http.MethodPut, other, buf.Bytes())); err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("PUT with the URL of another hash: %v %v", res, err)
	}
	req, _ := http.NewRequest(http.MethodPut, link.URL, bytes.NewReader(buf.Bytes()))
	for k, v := range link.Headers {
		req.Header.Set(k, v)
	}
	res, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("upload: %d %s", res.StatusCode, body)
	}
	r = e.api(t, http.MethodGet, "/templates/"+templateID+"/files/"+hash, nil)
	if r.status != http.StatusCreated || !strings.Contains(string(r.body), `"present":true`) {
		t.Fatalf("after the upload: %d %s", r.status, r.body)
	}
	return hash
}

func TestSDKTemplateBadInput(t *testing.T) {
	e := loadEnv(t)
	tpl := "e2e-sdkbad-" + uniqueTag(t)
	wantErr := func(r apiResp, status int, substr string) {
		t.Helper()
		errorBody(t, r, status)
		if !strings.Contains(string(r.body), substr) {
			t.Fatalf("error %s does not say %q", r.body, substr)
		}
	}
	// Names and tags.
	wantErr(e.api(t, http.MethodPost, "/v3/templates", map[string]any{"name": "Bad Name"}), 400, "invalid template name")
	wantErr(e.api(t, http.MethodPost, "/v3/templates", map[string]any{"name": tpl + ":bad/tag"}), 400, `invalid tag \"bad/tag\"`)
	wantErr(e.api(t, http.MethodPost, "/v3/templates", map[string]any{"name": tpl, "tags": []string{"ok", "no spaces"}}), 400, `invalid tag \"no spaces\"`)
	wantErr(e.api(t, http.MethodPost, "/templates/tags", map[string]any{"target": tpl, "tags": []string{"x;y"}}), 400, "invalid tag")
	// Uploads: a bad hash, a body that is not a tar.
	wantErr(e.api(t, http.MethodGet, "/templates/"+tpl+"/files/xyz", nil), 400, "not a sha256")
	hash := strings.Repeat("ab", 32)
	r := e.api(t, http.MethodPut, "/airlock/v1/template-files/"+hash, "this is not a tar archive, it is just text long enough to fill a tar header block? no: it is far shorter")
	wantErr(r, 400, "not a readable tar")
	r = e.api(t, http.MethodGet, "/templates/"+tpl+"/files/"+hash, nil)
	if r.status != http.StatusCreated || !strings.Contains(string(r.body), `"present":false`) {
		t.Fatalf("a refused upload is not present: %d %s", r.status, r.body)
	}

	b := e.requestV3(t, tpl+":v1", []string{"extra"})
	if b.TemplateID != tpl || strings.Join(b.Tags, ",") != "v1,extra" || strings.Join(b.Names, ",") != tpl+":v1,"+tpl+":extra" {
		t.Fatalf("v3 response: %+v", b)
	}
	other := e.requestV3(t, tpl+"-other", nil)
	start := func(templateID, buildID string, spec map[string]any) apiResp {
		return e.api(t, http.MethodPost, "/v2/templates/"+templateID+"/builds/"+buildID, spec)
	}
	base := func(steps ...map[string]any) map[string]any {
		return map[string]any{"fromTemplate": "base", "steps": steps, "force": false}
	}
	// A build id of another template; an unknown build.
	wantErr(start(tpl, other.BuildID, base()), 400, "does not belong to template")
	wantErr(start(tpl, "00000000-0000-4000-8000-000000000000", base()), 404, "not found")
	// Steps: unknown type, missing upload, bad hash, no base.
	wantErr(start(tpl, b.BuildID, base(map[string]any{"type": "ENV", "args": []string{"A", "1"}}, map[string]any{"type": "EXPOSE", "args": []string{"80"}})),
		400, "step 2 (EXPOSE): unknown step type")
	wantErr(start(tpl, b.BuildID, base(map[string]any{"type": "COPY", "args": []string{"app", "/app"}, "filesHash": hash})),
		400, "step 1 (COPY): the files of \\\"app\\\" (hash "+hash+") were not uploaded")
	wantErr(start(tpl, b.BuildID, base(map[string]any{"type": "COPY", "args": []string{"app", "/app"}, "filesHash": "abc"})),
		400, "step 1 (COPY): filesHash")
	wantErr(start(tpl, b.BuildID, map[string]any{"steps": []any{}}), 400, "fromImage or fromTemplate is required")
	wantErr(start(tpl, b.BuildID, map[string]any{"fromTemplate": "no-such-template-" + uniqueTag(t)}), 400, "template \\\"no-such-template-")
	// Still waiting after the refusals: a config-only build runs (no
	// sandbox needed), then the same build cannot start twice.
	if r := start(tpl, b.BuildID, base(map[string]any{"type": "ENV", "args": []string{"A", "1"}})); r.status != http.StatusAccepted {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	bi, logs := e.waitBuild(t, b)
	if bi.Status != "ready" {
		t.Fatalf("config-only build: %+v\n%s", bi, logs)
	}
	t.Cleanup(func() {
		e.api(t, http.MethodDelete, "/templates/tags", map[string]any{"name": tpl, "tags": []string{"v1", "extra"}})
	})
	wantErr(start(tpl, b.BuildID, base()), 409, "already started")
	// logsOffset past the end is an empty page; a bad one is refused.
	r = e.api(t, http.MethodGet, "/templates/"+tpl+"/builds/"+b.BuildID+"/status?logsOffset=100000", nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"logEntries":[]`) {
		t.Fatalf("status past the end: %d %s", r.status, r.body)
	}
	wantErr(e.api(t, http.MethodGet, "/templates/"+tpl+"/builds/"+b.BuildID+"/status?logsOffset=-1", nil), 400, "logsOffset")
	// The tags resolve; deleting the tagged template is refused.
	r = e.api(t, http.MethodGet, "/templates/"+tpl+"/tags", nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"tag":"v1"`) || !strings.Contains(string(r.body), `"tag":"extra"`) {
		t.Fatalf("tags: %d %s", r.status, r.body)
	}
	r = e.api(t, http.MethodGet, "/templates/aliases/"+tpl, nil)
	if r.status != http.StatusOK {
		t.Fatalf("alias of a name with only tags: %d %s", r.status, r.body)
	}
	wantErr(e.api(t, http.MethodPost, "/templates/tags", map[string]any{"target": tpl + ":nope", "tags": []string{"x"}}), 404, "not found")
}

// TestSDKTemplateFromImage: fromImage of an image on a loopback registry,
// an uploaded COPY, RUN, ENV, WORKDIR, start command; a sandbox from
// name:tag sees it all.
func TestSDKTemplateFromImage(t *testing.T) {
	e := loadEnv(t)
	token := uniqueTag(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	ref := u.Host + "/test/sdkbusy:1"
	r0, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r0, busyboxImage(t, token)); err != nil {
		t.Fatalf("pushing the test image: %v", err)
	}
	tpl := "e2e-sdkimg-" + token
	b := e.requestV3(t, tpl+":t1", nil)
	t.Cleanup(func() {
		e.api(t, http.MethodDelete, "/templates/tags", map[string]any{"name": tpl, "tags": []string{"t1"}})
	})
	hash := e.uploadFiles(t, tpl, map[string]string{"site/index.txt": "page " + token + "\n", "site/sub/deep.txt": "deep\n"})
	spec := map[string]any{
		"fromImage": ref,
		"steps": []map[string]any{
			{"type": "COPY", "args": []string{"site/", "/srv/site/", "", "0750"}, "filesHash": hash},
			{"type": "ENV", "args": []string{"MODE", "img", "QUOTED", `a "b" $c`}},
			{"type": "WORKDIR", "args": []string{"/srv/site"}},
			{"type": "RUN", "args": []string{"echo ran-$MODE > ran.txt; id -un > who.txt", "root"}},
		},
		"startCmd": "sleep 1000",
		"readyCmd": "true",
	}
	if r := e.api(t, http.MethodPost, "/v2/templates/"+tpl+"/builds/"+b.BuildID, spec); r.status != http.StatusAccepted {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	bi, logs := e.waitBuild(t, b)
	if bi.Status != "ready" {
		t.Fatalf("build: %+v\n%s", bi.Reason, logs)
	}
	for _, want := range []string{"[base] FROM image " + ref, "[1/4] COPY site/ /srv/site/", "[4/4] RUN echo ran-$MODE", "(as root)"} {
		if !strings.Contains(logs, want) {
			t.Errorf("build log lacks %q:\n%s", want, logs)
		}
	}
	cr := e.api(t, http.MethodPost, "/sandboxes", map[string]any{"templateID": tpl + ":t1", "timeout": 120})
	if cr.status != http.StatusCreated {
		t.Fatalf("POST /sandboxes from %s:t1: %d %s", tpl, cr.status, cr.body)
	}
	var s sandboxInfo
	cr.json(t, &s)
	t.Cleanup(func() { e.kill(s.SandboxID) })
	res, err := e.tryRunArgv(t, s, "", []string{"/bin/sh", "-c", `cat index.txt sub/deep.txt ran.txt who.txt; echo "$MODE|$QUOTED|$(pwd)|$(id -un)"; ls -l index.txt | cut -c1-10`}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := "page " + token + "\ndeep\nran-img\nroot\nimg|a \"b\" $c|/srv/site|user\n-rwxr-x---\n"
	if res.exitCode != 0 || res.stdout != want {
		t.Fatalf("in the sandbox: exit %d stdout %q stderr %q; want %q", res.exitCode, res.stdout, res.stderr, want)
	}
}

// TestSDKTemplateDaemonKilledMidBuild: SIGKILL while a step runs; after the
// restart the build reads as failed, the template does not exist and no
// scratch directory is left.
func TestSDKTemplateDaemonKilledMidBuild(t *testing.T) {
	e := loadEnv(t)
	dataDir := os.Getenv("AIRLOCK_E2E_DATA_DIR")
	if dataDir == "" {
		t.Fatal("AIRLOCK_E2E_DATA_DIR must be set")
	}
	tpl := "e2e-sdkkill-" + uniqueTag(t)
	b := e.requestV3(t, tpl, nil)
	spec := map[string]any{"fromTemplate": "base", "steps": []map[string]any{
		{"type": "RUN", "args": []string{"echo first > /tmp/first"}},
		{"type": "RUN", "args": []string{"echo sleeping; sleep 120"}},
	}}
	if r := e.api(t, http.MethodPost, "/v2/templates/"+tpl+"/builds/"+b.BuildID, spec); r.status != http.StatusAccepted {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	var logs []string
	restartDaemonWhen(t, e, func() bool {
		bi := e.buildStatus(t, b)
		for _, l := range bi.LogEntries {
			logs = append(logs, l.Message)
		}
		return strings.Contains(strings.Join(logs, "\n"), "\nsleeping")
	}, func() {})
	bi := e.buildStatus(t, b)
	if bi.Status != "error" || bi.Reason == nil || !strings.Contains(bi.Reason.Message, "interrupted") {
		t.Fatalf("status after the restart: %+v", bi)
	}
	if r := e.api(t, http.MethodGet, "/templates/aliases/"+tpl, nil); r.status != http.StatusNotFound {
		t.Fatalf("the interrupted template exists: %d %s", r.status, r.body)
	}
	// A restart's template GC moves collected builds through .trash-* and
	// may trail /health by a moment: wait for it, up to 30 s.
	_, scratch := templateDirs(t, dataDir)
	for deadline := time.Now().Add(30 * time.Second); len(scratch) > 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		_, scratch = templateDirs(t, dataDir)
	}
	if len(scratch) > 0 {
		t.Errorf("scratch directories left 30 s after the restart: %v", scratch)
	}
	// Still failed on the next read (recorded, not recomputed).
	if bi := e.buildStatus(t, b); bi.Status != "error" {
		t.Fatalf("second read: %+v", bi)
	}
}

func mustRequest(t *testing.T, method, u string, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestSDKTemplateRegistryCredentials: fromImageRegistry's username and
// password reach the registry (basic auth); without them the pull fails
// naming the base step.
func TestSDKTemplateRegistryCredentials(t *testing.T) {
	e := loadEnv(t)
	token := uniqueTag(t)
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "puller" || p != "s3cret-"+token {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	ref := u.Host + "/test/private:1"
	r0, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r0, busyboxImage(t, token), remote.WithAuth(&authn.Basic{Username: "puller", Password: "s3cret-" + token})); err != nil {
		t.Fatalf("pushing the test image: %v", err)
	}
	tpl := "e2e-sdkreg-" + token
	steps := []map[string]any{{"type": "ENV", "args": []string{"FROM_PRIVATE", "1"}}}

	b := e.requestV3(t, tpl, nil)
	spec := map[string]any{"fromImage": ref, "steps": steps}
	if r := e.api(t, http.MethodPost, "/v2/templates/"+tpl+"/builds/"+b.BuildID, spec); r.status != http.StatusAccepted {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	bi, logs := e.waitBuild(t, b)
	if bi.Status != "error" || bi.Reason == nil || bi.Reason.Step != "base" || !strings.Contains(bi.Reason.Message, "pulling image") {
		t.Fatalf("without credentials: %+v %+v\n%s", bi, bi.Reason, logs)
	}

	b = e.requestV3(t, tpl, nil)
	t.Cleanup(func() { e.api(t, http.MethodDelete, "/templates/"+tpl, nil) })
	spec["fromImageRegistry"] = map[string]any{"type": "registry", "username": "puller", "password": "s3cret-" + token}
	if r := e.api(t, http.MethodPost, "/v2/templates/"+tpl+"/builds/"+b.BuildID, spec); r.status != http.StatusAccepted {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	if bi, logs := e.waitBuild(t, b); bi.Status != "ready" {
		t.Fatalf("with credentials: %+v\n%s", bi.Reason, logs)
	}
	if strings.Contains(string(e.api(t, http.MethodGet, "/templates/"+tpl+"/builds/"+b.BuildID+"/logs?limit=1000", nil).body), "s3cret") {
		t.Fatal("the build log shows the registry password")
	}
}
