package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/store/sqlite"
	"github.com/airlock-sandbox/airlock/internal/volume"
)

// volHarness is a harness serving volumes from a SQLite store and a
// DirBacking in a temporary directory.
func volHarness(t *testing.T, ttl time.Duration) (*harness, string) {
	t.Helper()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	root := t.TempDir()
	b, err := volume.NewDirBacking(root)
	if err != nil {
		t.Fatal(err)
	}
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) {
		c.Volumes = b
		c.Runtime = mountingRuntime{c.Runtime.(*sandboxtest.Runtime)}
	})
	opts := api.Options{APIKey: testKey, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Volumes: &api.Volumes{Store: db, Backing: b, DefaultSizeMB: 20, MaxSizeMB: 64, TokenTTL: ttl}}
	srv := httptest.NewServer(api.New(env.Manager, &fakeTemplates{}, opts))
	t.Cleanup(srv.Close)
	return &harness{env: env, srv: srv}, root
}

// mountingRuntime is the fake runtime stating that it mounts volumes.
type mountingRuntime struct{ *sandboxtest.Runtime }

func (mountingRuntime) MountsVolumes() bool { return true }

type volJSON struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Token    string `json:"token"`
	SizeMB   int64  `json:"sizeMB"`
}

func createVolume(t *testing.T, h *harness, body string) volJSON {
	t.Helper()
	st, _, data := h.do(t, "POST", "/volumes", body)
	if st != http.StatusCreated {
		t.Fatalf("POST /volumes %s = %d %s", body, st, data)
	}
	return decode[volJSON](t, data)
}

// content sends a content API request with a bearer token.
func content(t *testing.T, h *harness, method, path, token string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// assertContentError checks a content API error: the status and a string
// code.
func assertContentError(t *testing.T, st int, data []byte, want int, code string) {
	t.Helper()
	var e struct {
		Code    any    `json:"code"`
		Message string `json:"message"`
	}
	if st != want || json.Unmarshal(data, &e) != nil || e.Code != code || e.Message == "" {
		t.Fatalf("got %d %s, want %d with code %q", st, data, want, code)
	}
}

func TestVolumeControlAPI(t *testing.T) {
	t.Parallel()
	h, root := volHarness(t, 0)
	v := createVolume(t, h, `{"name":"data-1"}`)
	if v.Name != "data-1" || v.Token == "" || v.SizeMB != 20 || len(v.VolumeID) != 36 {
		t.Fatalf("create = %+v", v)
	}
	if _, err := os.Stat(filepath.Join(root, v.VolumeID, "data")); err != nil {
		t.Fatalf("no storage made: %v", err)
	}
	st, _, data := h.do(t, "POST", "/volumes", `{"name":"data-1"}`)
	assertError(t, st, data, 400, "Volume with name 'data-1' already exists")
	for _, bad := range []string{`{"name":""}`, `{"name":"a b"}`, `{"name":"../x"}`, `{"name":"` + strings.Repeat("a", 251) + `"}`} {
		st, _, data := h.do(t, "POST", "/volumes", bad)
		assertError(t, st, data, 400, "Invalid volume name")
	}
	st, _, data = h.do(t, "POST", "/volumes", `{"name":"big","sizeMB":65}`)
	assertError(t, st, data, 400, "sizeMB must be between 16 and 64")
	st, _, data = h.do(t, "POST", "/volumes", `{"name":"small","sizeMB":15}`)
	assertError(t, st, data, 400, "sizeMB must be between 16 and 64")
	w := createVolume(t, h, `{"name":"Other_2","sizeMB":32}`)

	st, _, data = h.do(t, "GET", "/volumes", "")
	var list []map[string]any
	if st != 200 || json.Unmarshal(data, &list) != nil || len(list) != 2 || list[0]["volumeID"] != v.VolumeID || list[1]["name"] != "Other_2" || list[0]["token"] != nil {
		t.Fatalf("GET /volumes = %d %s", st, data)
	}
	st, _, data = h.do(t, "GET", "/volumes/"+w.VolumeID, "")
	if got := decode[volJSON](t, data); st != 200 || got.Name != "Other_2" || got.Token == "" || got.SizeMB != 32 {
		t.Fatalf("GET /volumes/{id} = %d %s", st, data)
	}
	st, _, data = h.do(t, "GET", "/volumes/not-a-uuid", "")
	assertError(t, st, data, 400, "Invalid volume ID")
	st, _, data = h.do(t, "GET", "/volumes/00000000-0000-4000-8000-000000000000", "")
	assertError(t, st, data, 404, "Volume not found")
	st, _, data = h.doKey(t, "GET", "/volumes", "", "e2b_wrong")
	assertError(t, st, data, 401, "Invalid API key")

	st, _, _ = h.do(t, "DELETE", "/volumes/"+v.VolumeID, "")
	if st != http.StatusNoContent {
		t.Fatalf("DELETE = %d", st)
	}
	if _, err := os.Stat(filepath.Join(root, v.VolumeID)); !os.IsNotExist(err) {
		t.Fatalf("storage left after delete: %v", err)
	}
	st, _, data = h.do(t, "DELETE", "/volumes/"+v.VolumeID, "")
	assertError(t, st, data, 404, "Volume not found")
	// The name is free again.
	createVolume(t, h, `{"name":"data-1"}`)
}

func TestVolumeContentAuth(t *testing.T) {
	t.Parallel()
	h, _ := volHarness(t, 0)
	v := createVolume(t, h, `{"name":"a"}`)
	w := createVolume(t, h, `{"name":"b"}`)
	p := "/volumecontent/" + v.VolumeID + "/path?path=/"
	if st, data := content(t, h, "GET", p, v.Token, nil); st != 200 {
		t.Fatalf("stat / with the token = %d %s", st, data)
	}
	st, data := content(t, h, "GET", p, "", nil)
	assertContentError(t, st, data, 401, "unauthorized")
	st, data = content(t, h, "GET", p, w.Token, nil)
	assertContentError(t, st, data, 401, "unauthorized") // another volume's token
	forged := v.Token[:len(v.Token)-4] + "AAAA"
	st, data = content(t, h, "GET", p, forged, nil)
	assertContentError(t, st, data, 401, "unauthorized")
	if st, data := content(t, h, "GET", p, testKey, nil); st != 200 { // the API key works too
		t.Fatalf("stat with the API key = %d %s", st, data)
	}
	st, data = content(t, h, "GET", "/volumecontent/00000000-0000-4000-8000-000000000000/path?path=/", testKey, nil)
	assertContentError(t, st, data, 404, "volume_not_found")

	// An expired token (a TTL of 1 ns ends within its second).
	h2, _ := volHarness(t, time.Nanosecond)
	x := createVolume(t, h2, `{"name":"x"}`)
	st, data = content(t, h2, "GET", "/volumecontent/"+x.VolumeID+"/path?path=/", x.Token, nil)
	assertContentError(t, st, data, 401, "unauthorized")
	if !strings.Contains(string(data), "expired") {
		t.Fatalf("expired token: %s", data)
	}
}

type entryJSON struct {
	Name, Type, Path string
	Size             int64
	Mode, UID, GID   uint32
	Mtime            time.Time
}

func TestVolumeContentOps(t *testing.T) {
	t.Parallel()
	h, root := volHarness(t, 0)
	v := createVolume(t, h, `{"name":"ops","sizeMB":16}`)
	base := "/volumecontent/" + v.VolumeID
	do := func(method, path string, body io.Reader) (int, []byte) {
		t.Helper()
		return content(t, h, method, base+path, v.Token, body)
	}
	st, data := do("PUT", "/file?path=/dir/a.txt", strings.NewReader("hi"))
	assertContentError(t, st, data, 404, "path_not_found") // no parent, no force
	st, data = do("PUT", "/file?path=/dir/a.txt&force=true&mode=420", strings.NewReader("hello"))
	if e := decode[entryJSON](t, data); st != 201 || e.Size != 5 || e.Mode != 0o644 || e.Type != "file" || e.UID != 1000 || e.Name != "a.txt" || e.Path != "/dir/a.txt" {
		t.Fatalf("PUT file = %d %s", st, data)
	}
	st, data = do("PUT", "/file?path=/dir/a.txt", strings.NewReader("again"))
	assertContentError(t, st, data, 409, "already_exists")
	st, data = do("PUT", "/file?path=/dir&force=true", strings.NewReader("x"))
	assertContentError(t, st, data, 409, "already_exists")
	if st, data := do("GET", "/file?path=/dir/a.txt", nil); st != 200 || string(data) != "hello" {
		t.Fatalf("GET file = %d %q", st, data)
	}
	st, data = do("GET", "/file?path=/dir", nil)
	assertContentError(t, st, data, 400, "is_directory")
	st, data = do("GET", "/file?path=/nope", nil)
	assertContentError(t, st, data, 404, "path_not_found")
	st, data = do("GET", "/file", nil)
	assertContentError(t, st, data, 400, "invalid_path")
	if st, data := do("GET", "/path?path=/dir", nil); st != 200 || decode[entryJSON](t, data).Type != "directory" {
		t.Fatalf("stat dir = %d %s", st, data)
	}
	st, data = do("POST", "/dir?path=/dir", nil)
	assertContentError(t, st, data, 409, "already_exists")
	if st, data := do("POST", "/dir?path=/dir&force=true", nil); st != 201 {
		t.Fatalf("mkdir existing with force = %d %s", st, data)
	}
	st, data = do("POST", "/dir?path=/x/y", nil)
	assertContentError(t, st, data, 404, "path_not_found")
	if st, data := do("POST", "/dir?path=/x/y&force=true&uid=0&gid=0&mode=448", nil); st != 201 || decode[entryJSON](t, data).Mode != 0o700 {
		t.Fatalf("mkdir -p = %d %s", st, data)
	}
	st, data = do("GET", "/dir?path=/&depth=2", nil)
	var ents []entryJSON
	if json.Unmarshal(data, &ents) != nil || st != 200 || len(ents) != 4 || ents[0].Path != "/dir" || ents[1].Path != "/dir/a.txt" || ents[3].Path != "/x/y" {
		t.Fatalf("list depth 2 = %d %s", st, data)
	}
	st, data = do("GET", "/dir?path=/dir/a.txt", nil)
	assertContentError(t, st, data, 400, "not_directory")
	st, data = do("GET", "/dir?path=/gone", nil)
	assertContentError(t, st, data, 404, "path_not_found")
	if st, data := do("PATCH", "/path?path=/dir/a.txt", strings.NewReader(`{"uid":5,"gid":6,"mode":384}`)); st != 200 {
		t.Fatalf("PATCH = %d %s", st, data)
	} else if e := decode[entryJSON](t, data); e.UID != 5 || e.GID != 6 || e.Mode != 0o600 {
		t.Fatalf("PATCH = %s", data)
	}
	st, data = do("PATCH", "/path?path=/gone", strings.NewReader(`{"mode":384}`))
	assertContentError(t, st, data, 404, "path_not_found")
	st, data = do("PATCH", "/path?path=/dir", strings.NewReader(`{"mode":65535}`))
	assertContentError(t, st, data, 400, "invalid_body")

	// Traversal and links out of the volume.
	for _, p := range []string{"/../../etc/passwd", "/dir/../../x", ".."} {
		st, data = do("GET", "/file?path="+p, nil)
		assertContentError(t, st, data, 400, "invalid_path")
	}
	if err := os.Symlink("/etc", filepath.Join(root, v.VolumeID, "data", "etc")); err != nil {
		t.Fatal(err)
	}
	st, data = do("GET", "/file?path=/etc/passwd", nil)
	assertContentError(t, st, data, 400, "invalid_path")
	st, data = do("PUT", "/file?path=/etc/airlock-test&force=true", strings.NewReader("x"))
	assertContentError(t, st, data, 400, "invalid_path")
	if _, err := os.Stat("/etc/airlock-test"); err == nil {
		t.Fatal("a write through a link reached /etc")
	}

	// The size limit (16 MiB): refused up front with a Content-Length,
	// while streaming without one; nothing half-written is left.
	big := bytes.Repeat([]byte("z"), 17<<20)
	st, data = do("PUT", "/file?path=/big", bytes.NewReader(big))
	assertContentError(t, st, data, 507, "insufficient_storage")
	st, data = do("PUT", "/file?path=/big", io.MultiReader(bytes.NewReader(big))) // no length: chunked
	assertContentError(t, st, data, 507, "insufficient_storage")
	st, data = do("GET", "/dir?path=/", nil)
	if st != 200 || strings.Contains(string(data), "big") || strings.Contains(string(data), volume.TempPrefix) {
		t.Fatalf("left behind by refused uploads: %s", data)
	}
	if st, data := do("PUT", "/file?path=/half", bytes.NewReader(big[:8<<20])); st != 201 {
		t.Fatalf("8 MiB into a 16 MiB volume = %d %s", st, data)
	}

	if st, _ := do("DELETE", "/path?path=/dir", nil); st != 204 {
		t.Fatalf("DELETE dir = %d", st)
	}
	st, data = do("DELETE", "/path?path=/dir", nil)
	assertContentError(t, st, data, 404, "path_not_found")
	st, data = do("DELETE", "/path?path=/", nil)
	assertContentError(t, st, data, 400, "invalid_path")
}

func TestCreateVolumeMountsValidation(t *testing.T) {
	t.Parallel()
	h, _ := volHarness(t, 0)
	createVolume(t, h, `{"name":"vol"}`)
	for body, want := range map[string]string{
		`{"templateID":"base","volumeMounts":[{"name":"vol","path":"data"}]}`:                             "invalid mounts:\n\t- volume mount #0: path must be absolute",
		`{"templateID":"base","volumeMounts":[{"name":"vol","path":""}]}`:                                 "volume mount #0: path cannot be empty",
		`{"templateID":"base","volumeMounts":[{"name":"vol","path":"/mnt/../etc"}]}`:                      "volume mount #0: path must not contain any '.' or '..' components",
		`{"templateID":"base","volumeMounts":[{"name":"vol","path":"/mnt/"}]}`:                            "volume mount #0: path must not contain any '.' or '..' components",
		`{"templateID":"base","volumeMounts":[{"name":"vol","path":"/a"},{"name":"vol","path":"/a"}]}`:    "volume mount #1: path '/a' is already used",
		`{"templateID":"base","volumeMounts":[{"name":"nope","path":"/a"}]}`:                              "volume mount #0: volume 'nope' not found",
		`{"templateID":"base","volumeMounts":[{"name":"vol","path":"/"}]}`:                                "volume mount #0: path '/' would hide the sandbox's root filesystem",
		`{"templateID":"base","volumeMounts":[{"name":"vol","path":"/proc"}]}`:                            "volume mount #0: path '/proc' would hide /proc",
		`{"templateID":"base","volumeMounts":[{"name":"vol","path":"/dev/x"}]}`:                           "volume mount #0: path '/dev/x' would hide /dev",
		`{"templateID":"base","volumeMounts":[{"name":"vol","path":"/usr"}]}`:                             "volume mount #0: path '/usr' would hide the sandbox agent",
		`{"templateID":"base","volumeMounts":[{"name":"vol","path":"/ok"},{"name":"x","path":"rel"}]}`:    "invalid mounts:\n\t- volume mount #1: path must be absolute",
		`{"templateID":"base","volumeMounts":[{"name":"x","path":"/a"},{"name":"vol","path":"/sys/fs"}]}`: "invalid mounts:\n\t- volume mount #0: volume 'x' not found\n\t- volume mount #1: path '/sys/fs' would hide /sys",
	} {
		for _, ep := range []string{"/sandboxes", "/v2/sandboxes"} {
			st, _, data := h.do(t, "POST", ep, body)
			assertError(t, st, data, 400, want)
		}
	}
	// The same volume twice, at two paths, is allowed (as in E2B).
	st, _, data := h.do(t, "POST", "/v2/sandboxes", `{"templateID":"base","volumeMounts":[{"name":"vol","path":"/mnt/a"},{"name":"vol","path":"/mnt/b"}]}`)
	if st != 201 {
		t.Fatalf("two mounts of one volume = %d %s", st, data)
	}
	id := decode[map[string]any](t, data)["sandboxID"].(string)
	st, _, data = h.do(t, "GET", "/sandboxes/"+id, "")
	var detail struct {
		VolumeMounts []map[string]string `json:"volumeMounts"`
	}
	if err := json.Unmarshal(data, &detail); err != nil || st != 200 || len(detail.VolumeMounts) != 2 ||
		detail.VolumeMounts[0]["name"] != "vol" || detail.VolumeMounts[1]["path"] != "/mnt/b" {
		t.Fatalf("GET /sandboxes/{id} volumeMounts = %d %s", st, data)
	}
	// A daemon without volumes says so.
	plain := newHarness(t, api.Options{})
	st, _, data = plain.do(t, "POST", "/v2/sandboxes", `{"templateID":"base","volumeMounts":[{"name":"vol","path":"/mnt"}]}`)
	assertError(t, st, data, 400, "Volume mounts are not enabled.")
	st, _, data = plain.do(t, "GET", "/volumes", "")
	assertError(t, st, data, 501, "volumes are not enabled")
}
