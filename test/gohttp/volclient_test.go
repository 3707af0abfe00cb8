//go:build e2e

package gohttp

// The client side of volumes (issue 27) against the daemon: the Go SDK's
// Volume (control calls, every content method, VolumeMounts on create),
// read-only mounts (Airlock's readOnly: EROFS in the sandbox, the volume
// unchanged, another sandbox still writes), and the CLI's `airlock volume`
// commands and `create --volume`.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

func (e env) sdk() *airlock.Client {
	c := airlock.New(e.apiURL, e.apiKey)
	c.SandboxURL = e.sandboxURL
	return c
}

// sdkSandbox wraps an SDK sandbox as the helpers' sandboxInfo.
func sdkSandbox(s *airlock.Sandbox) sandboxInfo {
	return sandboxInfo{SandboxID: s.ID, EnvdAccessToken: s.AccessToken}
}

func TestSDKVolume(t *testing.T) {
	e := loadEnv(t)
	c := e.sdk()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	name := "sdkvol" + uniqueTag(t)
	v, err := c.CreateVolume(ctx, airlock.NewVolume{Name: name, SizeMB: 32})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DestroyVolume(context.Background(), v.VolumeID) })
	if v.Token == "" || v.SizeMB != 32 || v.Name != name {
		t.Fatalf("created %+v", v.VolumeInfo)
	}
	if _, err := c.CreateVolume(ctx, airlock.NewVolume{Name: name}); airlock.StatusOf(err) != 400 || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("a second create of %s: %v, want 400 already exists", name, err)
	}

	t.Run("content", func(t *testing.T) {
		mode := uint32(0o640)
		e1, err := v.WriteFile(ctx, "/a/b/hello.txt", strings.NewReader("hello volume"), airlock.VolumeWriteOptions{Force: true, Mode: &mode})
		if err != nil || e1.Size != 12 || e1.Mode != 0o640 || e1.Type != "file" || e1.Path != "/a/b/hello.txt" {
			t.Fatalf("WriteFile = %+v, %v", e1, err)
		}
		if _, err := v.WriteFile(ctx, "/a/b/hello.txt", strings.NewReader("again"), airlock.VolumeWriteOptions{}); airlock.StatusOf(err) != 409 {
			t.Fatalf("overwrite without force: %v, want 409", err)
		}
		if _, err := v.WriteFile(ctx, "/no/parent.txt", strings.NewReader("x"), airlock.VolumeWriteOptions{}); !airlock.IsNotFound(err) {
			t.Fatalf("write under a missing parent without force: %v, want 404", err)
		}
		// The connected handle (by name) reads what the first wrote.
		byName, err := c.ConnectVolume(ctx, name)
		if err != nil || byName.VolumeID != v.VolumeID || byName.Token == "" {
			t.Fatalf("ConnectVolume(%s) = %+v, %v", name, byName, err)
		}
		if b, err := byName.ReadFile(ctx, "/a/b/hello.txt"); err != nil || string(b) != "hello volume" {
			t.Fatalf("ReadFile = %q, %v", b, err)
		}
		if _, err := v.MakeDir(ctx, "/d", airlock.VolumeWriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := v.MakeDir(ctx, "/d", airlock.VolumeWriteOptions{}); airlock.StatusOf(err) != 409 {
			t.Fatalf("MakeDir of an existing dir: %v, want 409", err)
		}
		if _, err := v.MakeDir(ctx, "/d/e/f", airlock.VolumeWriteOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
		list, err := v.List(ctx, "/", 1)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, x := range list {
			names = append(names, x.Name)
		}
		if strings.Join(names, ",") != "a,d" {
			t.Fatalf("List(/) = %v, want a,d", names)
		}
		if deep, err := v.List(ctx, "/d", 3); err != nil || len(deep) != 2 {
			t.Fatalf("List(/d, 3) = %+v, %v; want e and e/f", deep, err)
		}
		if ok, err := v.Exists(ctx, "/d/e"); !ok || err != nil {
			t.Fatalf("Exists(/d/e) = %v, %v", ok, err)
		}
		if ok, err := v.Exists(ctx, "/nope"); ok || err != nil {
			t.Fatalf("Exists(/nope) = %v, %v", ok, err)
		}
		if _, err := v.GetInfo(ctx, "/nope"); !airlock.IsNotFound(err) || !strings.Contains(err.Error(), "404") {
			t.Fatalf("GetInfo(/nope) = %v, want 404", err)
		} else {
			var ae *airlock.APIError
			if errors.As(err, &ae); ae.Code != "path_not_found" {
				t.Fatalf("GetInfo(/nope) code %q, want path_not_found", ae.Code)
			}
		}
		uid := uint32(1234)
		if st, err := v.UpdateMetadata(ctx, "/d", airlock.VolumeMetadata{UID: &uid}); err != nil || st.UID != 1234 {
			t.Fatalf("UpdateMetadata = %+v, %v", st, err)
		}
		if err := v.Remove(ctx, "/d"); err != nil {
			t.Fatal(err)
		}
		if ok, _ := v.Exists(ctx, "/d/e/f"); ok {
			t.Fatal("Remove(/d) left /d/e/f")
		}
		infos, err := c.ListVolumes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, i := range infos {
			if i.VolumeID == v.VolumeID {
				found = i.Name == name && i.SizeMB == 32 && i.UsedBytes != nil && *i.UsedBytes > 0
			}
		}
		if !found {
			t.Fatalf("ListVolumes lacks %s with its size and use: %+v", name, infos)
		}
	})

	t.Run("readonly-mount", func(t *testing.T) {
		if _, err := v.WriteFile(ctx, "/keep.txt", strings.NewReader("original"), airlock.VolumeWriteOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
		ro, err := c.CreateSandbox(ctx, airlock.SandboxOptions{Template: "base", VolumeMounts: []airlock.VolumeMount{{Name: name, Path: "/mnt/ro", ReadOnly: true}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.kill(ro.ID) })
		rw, err := c.CreateSandbox(ctx, airlock.SandboxOptions{Template: "base", VolumeMounts: []airlock.VolumeMount{{Name: name, Path: "/mnt/rw"}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.kill(rw.ID) })
		a, b := sdkSandbox(ro), sdkSandbox(rw)
		if got := e.sh(t, a, "user", "cat /mnt/ro/keep.txt"); got != "original" {
			t.Fatalf("the read-only mount reads %q", got)
		}
		for _, cmd := range []string{"echo changed > /mnt/ro/keep.txt", "touch /mnt/ro/new", "rm /mnt/ro/keep.txt", "mkdir /mnt/ro/dir"} {
			for _, user := range []string{"user", "root"} {
				res := e.run(t, a, user, cmd, time.Minute)
				if res.exitCode == 0 || !strings.Contains(res.stderr, "Read-only file system") {
					t.Errorf("%s as %s on the read-only mount: exit %d, stderr %q; want EROFS", cmd, user, res.exitCode, res.stderr)
				}
			}
		}
		if got, err := v.ReadFile(ctx, "/keep.txt"); err != nil || string(got) != "original" {
			t.Fatalf("the volume holds %q, %v after the refused writes", got, err)
		}
		if ok, _ := v.Exists(ctx, "/new"); ok {
			t.Fatal("a file appeared in the volume through the read-only mount")
		}
		// The other sandbox mounts it read-write and writes; the read-only
		// one sees the write.
		e.sh(t, b, "user", "echo from-rw > /mnt/rw/keep.txt")
		if got := e.sh(t, a, "user", "cat /mnt/ro/keep.txt"); got != "from-rw" {
			t.Fatalf("the read-only mount reads %q after the read-write write", got)
		}
		info, err := c.GetSandbox(ctx, ro.ID)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := airlock.ParseVolumeMounts(info.VolumeMounts)
		if err != nil || len(ms) != 1 || ms[0] != (airlock.VolumeMount{Name: name, Path: "/mnt/ro", ReadOnly: true}) {
			t.Fatalf("the sandbox lists mounts %+v, %v", ms, err)
		}
		got, err := c.GetVolume(ctx, v.VolumeID)
		if err != nil || strings.Join(got.MountedBy, ",") != strings.Join(sortedPair(ro.ID, rw.ID), ",") {
			t.Fatalf("GetVolume mountedBy = %v, %v; want both sandboxes", got.MountedBy, err)
		}
	})

	if ok, err := v.Destroy(ctx); !ok || err != nil {
		t.Fatalf("Destroy = %v, %v", ok, err)
	}
	if ok, err := c.DestroyVolume(ctx, v.VolumeID); ok || err != nil {
		t.Fatalf("a second Destroy = %v, %v; want false", ok, err)
	}
	if _, err := c.ConnectVolume(ctx, name); !airlock.IsNotFound(err) {
		t.Fatalf("ConnectVolume of a destroyed volume: %v", err)
	}
}

func sortedPair(a, b string) []string {
	if a > b {
		a, b = b, a
	}
	return []string{a, b}
}

// airlockCLI runs the CLI in-process against the daemon.
func (e env) airlockCLI(t *testing.T, stdin io.Reader, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root := cli.NewRoot()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	root.SetIn(stdin)
	t.Setenv("E2B_SANDBOX_URL", e.sandboxURL)
	root.SetArgs(append([]string{"--url", e.apiURL, "--api-key", e.apiKey}, args...))
	err := root.ExecuteContext(ctx)
	if err != nil {
		err = errors.Join(err, errors.New("stderr: "+errb.String()))
	}
	return out.String(), err
}

func (e env) mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.airlockCLI(t, nil, args...)
	if err != nil {
		t.Fatalf("airlock %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func TestCLIVolume(t *testing.T) {
	e := loadEnv(t)
	name := "clivol" + uniqueTag(t)
	id := strings.TrimSpace(e.mustCLI(t, "volume", "create", name, "--size-mb", "24"))
	t.Cleanup(func() { e.sdk().DestroyVolume(context.Background(), id) })

	// A local tree goes in (recursively) and comes back out unchanged.
	src := filepath.Join(t.TempDir(), "tree")
	files := map[string]string{"top.txt": "top\n", "sub/inner.txt": "inner\n", "sub/deeper/bin.dat": "\x00\x01\x02"}
	for p, body := range files {
		full := filepath.Join(src, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e.mustCLI(t, "volume", "cp", src, name+":/data")
	if out := e.mustCLI(t, "volume", "ls-files", name+":/data", "--depth", "3"); !strings.Contains(out, "/data/sub/deeper/bin.dat") || !strings.Contains(out, "/data/top.txt") {
		t.Fatalf("ls-files:\n%s", out)
	}
	if out, err := e.airlockCLI(t, strings.NewReader("from stdin"), "volume", "cp", "-", name+":/stdin.txt"); err != nil {
		t.Fatalf("cp - %s:/stdin.txt: %v %s", name, err, out)
	}
	if out := e.mustCLI(t, "volume", "cp", name+":/stdin.txt", "-"); out != "from stdin" {
		t.Fatalf("cp to stdout = %q", out)
	}
	back := filepath.Join(t.TempDir(), "back")
	e.mustCLI(t, "volume", "cp", name+":/data", back)
	for p, body := range files {
		if got, err := os.ReadFile(filepath.Join(back, p)); err != nil || string(got) != body {
			t.Errorf("%s came back as %q, %v; want %q", p, got, err, body)
		}
	}
	// cp into an existing directory puts the source under it by name.
	e.mustCLI(t, "volume", "cp", filepath.Join(src, "top.txt"), name+":/data/sub")
	if out := e.mustCLI(t, "volume", "cp", name+":/data/sub/top.txt", "-"); out != "top\n" {
		t.Fatalf("cp into a directory: %q", out)
	}

	// A sandbox from the CLI with the volume mounted read-only.
	sb := strings.TrimSpace(e.mustCLI(t, "create", "--template", "base", "--volume", name+":/mnt/v:ro"))
	t.Cleanup(func() { e.kill(sb) })
	s := sandboxInfo{SandboxID: sb}
	if det, err := e.sdk().GetSandbox(context.Background(), sb); err == nil {
		s.EnvdAccessToken = det.EnvdAccessToken
	}
	if got := e.sh(t, s, "user", "cat /mnt/v/data/sub/inner.txt"); got != "inner" {
		t.Fatalf("the sandbox reads %q", got)
	}
	if res := e.run(t, s, "user", "touch /mnt/v/x", time.Minute); res.exitCode == 0 {
		t.Fatal("a --volume ...:ro mount took a write")
	}

	ls := e.mustCLI(t, "volume", "ls")
	var row string
	for line := range strings.Lines(ls) {
		if strings.HasPrefix(line, name+" ") {
			row = line
		}
	}
	if !strings.Contains(row, id) || !strings.Contains(row, "24 MiB") || !strings.Contains(row, sb) {
		t.Fatalf("volume ls row %q lacks the id, the 24 MiB limit or the mounting sandbox:\n%s", row, ls)
	}
	if out := e.mustCLI(t, "volume", "ls", "--json"); !strings.Contains(out, `"usedBytes"`) || !strings.Contains(out, id) {
		t.Fatalf("volume ls --json:\n%s", out)
	}
	e.kill(sb)
	if out := e.mustCLI(t, "volume", "rm", name); strings.TrimSpace(out) != name {
		t.Fatalf("volume rm printed %q", out)
	}
	if _, err := e.airlockCLI(t, nil, "volume", "rm", name); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("a second rm: %v", err)
	}
}
