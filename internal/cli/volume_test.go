package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
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
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// volumeDaemon serves the real volume API (internal/api over SQLite and a
// DirBacking) with a fake sandbox runtime that mounts volumes.
func volumeDaemon(t *testing.T) (url string, rt *sandboxtest.Runtime) {
	t.Helper()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	b, err := volume.NewDirBacking(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) {
		c.Volumes = b
		c.Runtime = mountingRuntime{c.Runtime.(*sandboxtest.Runtime)}
	})
	opts := api.Options{APIKey: fakeKey, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Volumes: &api.Volumes{Store: db, Backing: b, DefaultSizeMB: 20, MaxSizeMB: 64}}
	srv := httptest.NewServer(api.New(env.Manager, nil, opts))
	t.Cleanup(srv.Close)
	return srv.URL, env.Runtime
}

type mountingRuntime struct{ *sandboxtest.Runtime }

func (mountingRuntime) MountsVolumes() bool { return true }

func runAt(t *testing.T, url string, stdin io.Reader, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	root := NewRoot()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	root.SetIn(stdin)
	root.SetArgs(append([]string{"--url", url, "--api-key", fakeKey}, args...))
	err := root.ExecuteContext(ctx)
	return result{out.String(), errb.String(), err}
}

func mustRunAt(t *testing.T, url string, args ...string) string {
	t.Helper()
	r := runAt(t, url, nil, args...)
	if r.err != nil {
		t.Fatalf("airlock %s: %v (stderr %q)", strings.Join(args, " "), r.err, r.stderr)
	}
	return r.stdout
}

func TestVolumeCommands(t *testing.T) {
	url, rt := volumeDaemon(t)
	id := strings.TrimSpace(mustRunAt(t, url, "volume", "create", "data", "--size-mb", "32"))
	if len(id) != 36 {
		t.Fatalf("volume create printed %q, want an id", id)
	}
	if r := runAt(t, url, nil, "volume", "create", "data"); r.err == nil || !strings.Contains(r.err.Error(), "Volume with name 'data' already exists") {
		t.Fatalf("a second create: %v", r.err)
	}
	if r := runAt(t, url, nil, "volume", "create", "x", "--bucket-endpoint", "http://s3"); r.err == nil || !strings.Contains(r.err.Error(), "need --bucket") {
		t.Fatalf("--bucket-endpoint without --bucket: %v", r.err)
	}

	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "a.txt"), []byte("alpha"), 0o644)
	os.WriteFile(filepath.Join(src, "sub", "b.txt"), []byte("beta"), 0o644)
	mustRunAt(t, url, "volume", "cp", src, "data:/in")
	if r := runAt(t, url, strings.NewReader("piped"), "volume", "cp", "-", "data:/p.txt"); r.err != nil {
		t.Fatal(r.err)
	}
	if got := mustRunAt(t, url, "volume", "cp", "data:p.txt", "-"); got != "piped" {
		t.Fatalf("cp data:p.txt - = %q", got)
	}
	files := mustRunAt(t, url, "volume", "ls-files", "data:/in", "--depth", "2")
	for _, want := range []string{"/in/a.txt", "/in/sub", "/in/sub/b.txt", "MODE"} {
		if !strings.Contains(files, want) {
			t.Errorf("ls-files lacks %q:\n%s", want, files)
		}
	}
	dst := filepath.Join(t.TempDir(), "out")
	mustRunAt(t, url, "volume", "cp", "data:/in", dst)
	if b, err := os.ReadFile(filepath.Join(dst, "sub", "b.txt")); err != nil || string(b) != "beta" {
		t.Fatalf("downloaded sub/b.txt = %q, %v", b, err)
	}
	// A second download into the now existing directory nests by name.
	mustRunAt(t, url, "volume", "cp", "data:/in", dst)
	if b, err := os.ReadFile(filepath.Join(dst, "in", "a.txt")); err != nil || string(b) != "alpha" {
		t.Fatalf("download into an existing dir: %q, %v", b, err)
	}
	for _, bad := range [][]string{{"volume", "cp", "a", "b"}, {"volume", "cp", "data:/x", "data:/y"}, {"volume", "cp", "nope:/x", "-"}} {
		if r := runAt(t, url, nil, bad...); r.err == nil {
			t.Errorf("airlock %v succeeded", bad)
		}
	}

	sb := strings.TrimSpace(mustRunAt(t, url, "create", "--volume", "data:/mnt/ro:ro", "--volume", "data:/mnt/rw"))
	mounts := rt.SpecOf(sb).Mounts
	if len(mounts) != 2 || mounts[0].Destination != "/mnt/ro" || !mounts[0].ReadOnly || mounts[1].ReadOnly {
		t.Fatalf("create --volume gave mounts %+v", mounts)
	}
	if r := runAt(t, url, nil, "create", "--volume", "data:relative"); r.err == nil || !strings.Contains(r.err.Error(), "want NAME:/path") {
		t.Fatalf("--volume data:relative: %v", r.err)
	}
	if r := runAt(t, url, nil, "create", "--volume", "missing:/m"); r.err == nil || !strings.Contains(r.err.Error(), "volume 'missing' not found") {
		t.Fatalf("--volume missing:/m: %v", r.err)
	}

	ls := mustRunAt(t, url, "volume", "ls")
	lines := strings.Split(strings.TrimSpace(ls), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[1], id) || !strings.Contains(lines[1], "32 MiB") || !strings.Contains(lines[1], sb) {
		t.Fatalf("volume ls:\n%s", ls)
	}
	var listed []airlock.VolumeInfo
	if err := decodeJSON(mustRunAt(t, url, "volume", "ls", "--json"), &listed); err != nil || len(listed) != 1 || listed[0].UsedBytes == nil || *listed[0].UsedBytes == 0 {
		t.Fatalf("volume ls --json = %+v, %v", listed, err)
	}
	if got := strings.TrimSpace(mustRunAt(t, url, "volume", "rm", "data")); got != "data" {
		t.Fatalf("rm printed %q", got)
	}
	if r := runAt(t, url, nil, "volume", "rm", "data", id); r.err == nil || !strings.Contains(r.err.Error(), "volume data not found") || !strings.Contains(r.err.Error(), "volume "+id+" not found") {
		t.Fatalf("rm of a deleted volume: %v", r.err)
	}
}

func TestParseVolumeFlags(t *testing.T) {
	got, err := parseVolumeFlags([]string{"a:/x", "b:/y/z:ro", "c:/w:rw"})
	want := []airlock.VolumeMount{{Name: "a", Path: "/x"}, {Name: "b", Path: "/y/z", ReadOnly: true}, {Name: "c", Path: "/w"}}
	if err != nil || len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("parseVolumeFlags = %+v, %v", got, err)
	}
	for _, bad := range []string{"a", ":/x", "a:x", "a:"} {
		if _, err := parseVolumeFlags([]string{bad}); err == nil {
			t.Errorf("--volume %q accepted", bad)
		}
	}
}

func decodeJSON(s string, v any) error { return json.Unmarshal([]byte(s), v) }
