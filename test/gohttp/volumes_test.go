//go:build e2e

package gohttp

// Volumes mounted into sandboxes (issue 27, the host side): two sandboxes
// share one volume live, a full volume gives its writer ENOSPC and leaves
// the sandbox and the node alone, a sandbox cannot leave its mount, and
// pause/resume and fork keep the same volume.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/volume"
)

// newTestVolume makes a volume of sizeMB through the volume API and
// returns its name and its directory on the daemon's node.
func newTestVolume(t *testing.T, sizeMB int64) (name, dir string) {
	t.Helper()
	name, _, dir = newTestVolumeID(t, sizeMB)
	return name, dir
}

// newTestVolumeID is newTestVolume that also returns the volume's id. The
// volume is deleted when the test ends (a test may delete it first).
func newTestVolumeID(t *testing.T, sizeMB int64) (name, id, dir string) {
	t.Helper()
	e := loadEnv(t)
	data := os.Getenv("AIRLOCK_E2E_DATA_DIR")
	if data == "" {
		t.Fatal("AIRLOCK_E2E_DATA_DIR must be set (run scripts/test.sh)")
	}
	name = "e2evol" + uniqueTag(t)
	r := e.api(t, http.MethodPost, "/volumes", map[string]any{"name": name, "sizeMB": sizeMB})
	if r.status != http.StatusCreated {
		t.Fatalf("POST /volumes: %d %s", r.status, r.body)
	}
	var v struct{ VolumeID string }
	r.json(t, &v)
	id = v.VolumeID
	t.Cleanup(func() {
		if r := e.api(t, http.MethodDelete, "/volumes/"+id, nil); r.status != http.StatusNoContent && r.status != http.StatusNotFound {
			t.Logf("deleting volume %s: %d %s", name, r.status, r.body)
		}
	})
	b, err := volume.OpenLoop(context.Background(), filepath.Join(data, "volumes"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if dir, err = b.Dir(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	return name, id, dir
}

// createWithVolumes creates a base sandbox with volumeMounts (mount path →
// volume name) and registers its kill.
func (e env) createWithVolumes(t *testing.T, mounts map[string]string) sandboxInfo {
	t.Helper()
	var vm []map[string]string
	for path, name := range mounts {
		vm = append(vm, map[string]string{"name": name, "path": path})
	}
	r := e.api(t, http.MethodPost, "/sandboxes", map[string]any{
		"templateID": "base", "timeout": 300, "secure": true, "volumeMounts": vm,
	})
	if r.status != http.StatusCreated {
		t.Fatalf("POST /sandboxes with volumeMounts: %d %s", r.status, r.body)
	}
	var s sandboxInfo
	r.json(t, &s)
	t.Cleanup(func() { e.kill(s.SandboxID) })
	return s
}

// sh runs cmd as user and fails the test unless it exits 0; it returns
// the trimmed stdout.
func (e env) sh(t *testing.T, s sandboxInfo, user, cmd string) string {
	t.Helper()
	res := e.run(t, s, user, cmd, time.Minute)
	if res.exitCode != 0 {
		t.Fatalf("%s in %s: exit %d, stdout %q, stderr %q", cmd, s.SandboxID, res.exitCode, res.stdout, res.stderr)
	}
	return strings.TrimSpace(res.stdout)
}

func TestVolumeMounts(t *testing.T) {
	e := loadEnv(t)
	name, id, hostDir := newTestVolumeID(t, 64)
	a := e.createWithVolumes(t, map[string]string{"/mnt/data": name})
	b := e.createWithVolumes(t, map[string]string{"/home/user/shared": name})

	t.Run("shared-live", func(t *testing.T) {
		// The default user writes (the volume's root is writable to it);
		// the other sandbox reads it at once, and an overwrite in B is not
		// served stale from A's cache.
		e.sh(t, a, "user", "echo one > /mnt/data/f && mkdir -p /mnt/data/d && echo x > /mnt/data/d/g")
		if got := e.sh(t, b, "user", "cat /home/user/shared/f /home/user/shared/d/g"); got != "one\nx" {
			t.Fatalf("B reads %q, want A's writes", got)
		}
		e.sh(t, b, "user", "echo two > /home/user/shared/f")
		if got := e.sh(t, a, "user", "cat /mnt/data/f"); got != "two" {
			t.Fatalf("A reads %q after B's overwrite, want two", got)
		}
		e.sh(t, b, "root", "rm /home/user/shared/d/g")
		if got := e.sh(t, a, "user", "ls /mnt/data/d | wc -l"); got != "0" {
			t.Fatalf("A still lists %s file(s) B removed", got)
		}
		// The host (the content API's directory) sees the same files.
		if b, err := os.ReadFile(filepath.Join(hostDir, "f")); err != nil || string(b) != "two\n" {
			t.Fatalf("host reads %q %v", b, err)
		}
		if err := os.WriteFile(filepath.Join(hostDir, "fromhost"), []byte("h"), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := e.sh(t, a, "user", "cat /mnt/data/fromhost"); got != "h" {
			t.Fatalf("A reads the host's write as %q", got)
		}
	})

	t.Run("enospc", func(t *testing.T) {
		// What the node gives the volume is its image's allocated blocks:
		// measured on the image itself, not as the host's free space,
		// which anything else on the machine moves meanwhile.
		img := filepath.Join(os.Getenv("AIRLOCK_E2E_DATA_DIR"), "volumes", id, "disk.img")
		allocated := func() int64 {
			var st syscall.Stat_t
			if err := syscall.Stat(img, &st); err != nil {
				t.Fatal(err)
			}
			return st.Blocks * 512
		}
		before := allocated()
		res := e.run(t, a, "user", "dd if=/dev/zero of=/mnt/data/big bs=1M count=200 conv=fsync", 2*time.Minute)
		if res.exitCode == 0 || !strings.Contains(res.stderr, "No space left on device") {
			t.Fatalf("200 MiB into a 64 MiB volume: exit %d, stderr %q; want ENOSPC", res.exitCode, res.stderr)
		}
		// (The host filesystem's own extent blocks for the image may add
		// a few KiB: 1 MiB of slack.)
		if after := allocated(); after > 65<<20 {
			t.Fatalf("the volume's image holds %d MiB of the node's disk (was %d MiB) for a 64 MiB volume", after>>20, before>>20)
		} else if after-before < 32<<20 {
			t.Fatalf("the image grew by only %d MiB: the 200 MiB write did not reach it", (after-before)>>20)
		}
		// The sandbox, its own disk and the other sandbox go on; space
		// comes back once the file goes.
		e.sh(t, a, "user", "echo fine > /tmp/own && cat /tmp/own")
		e.sh(t, b, "user", "rm /home/user/shared/big && echo ok > /home/user/shared/after")
		if got := e.sh(t, a, "user", "cat /mnt/data/after"); got != "ok" {
			t.Fatalf("after freeing: %q", got)
		}
	})

	t.Run("escapes", func(t *testing.T) {
		// `..` from the mount is the sandbox's own tree.
		if got := e.sh(t, a, "root", "cat /mnt/data/../../etc/hostname"); got != a.SandboxID {
			t.Fatalf("/mnt/data/../../etc/hostname = %q, want the sandbox's own %q", got, a.SandboxID)
		}
		// A symlink made in the volume resolves inside the sandbox that
		// follows it…
		e.sh(t, a, "root", "ln -s /etc/shadow /mnt/data/shadow && ln -s ../../../../../etc/passwd /mnt/data/up")
		if got, want := e.sh(t, b, "root", "cat /home/user/shared/shadow | head -1"), e.sh(t, b, "root", "head -1 /etc/shadow"); got != want {
			t.Fatalf("symlink read %q, want the sandbox's own /etc/shadow %q", got, want)
		}
		// …and the host's file access confined to the volume (os.Root,
		// what the content API serves with) refuses to follow it out.
		root, err := os.OpenRoot(hostDir)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		for _, p := range []string{"shadow", "up", "../../../etc/passwd"} {
			if f, err := root.Open(p); err == nil {
				f.Close()
				t.Fatalf("host-side open of %q through the volume succeeded", p)
			}
		}
		// A hard link to a file outside the volume is impossible (another
		// filesystem), as root too.
		res := e.run(t, a, "root", "ln /etc/passwd /mnt/data/hl", time.Minute)
		if res.exitCode == 0 {
			t.Fatal("hard link from the sandbox's /etc/passwd into the volume succeeded")
		}
		if _, err := os.Lstat(filepath.Join(hostDir, "hl")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("hard link appeared on the host: %v", err)
		}
		// The sandbox cannot mount or bind anything over its volume.
		if res := e.run(t, a, "root", "mount --bind / /mnt/data", time.Minute); res.exitCode == 0 {
			t.Fatal("bind mount inside the sandbox succeeded")
		}
		// Nothing in the volume is setuid or a device on the host.
		outb, err := exec.Command("findmnt", "-n", "-o", "OPTIONS", "-T", hostDir).Output()
		out := string(outb)
		if err != nil || !strings.Contains(out, "nosuid") || !strings.Contains(out, "nodev") {
			t.Fatalf("host mount options of the volume: %q %v", out, err)
		}
	})

	t.Run("pause-resume", func(t *testing.T) {
		e.sh(t, a, "user", "echo before-pause > /mnt/data/p")
		if r := e.api(t, http.MethodPost, "/sandboxes/"+a.SandboxID+"/pause", nil); r.status != http.StatusNoContent {
			t.Fatalf("pause: %d %s", r.status, r.body)
		}
		e.sh(t, b, "user", "echo while-paused > /home/user/shared/p")
		if r := e.api(t, http.MethodPost, "/sandboxes/"+a.SandboxID+"/connect", map[string]any{"timeout": 300}); r.status != http.StatusCreated {
			t.Fatalf("resume: %d %s", r.status, r.body)
		}
		if got := e.sh(t, a, "user", "cat /mnt/data/p"); got != "while-paused" {
			t.Fatalf("resumed sandbox reads %q, want B's write while it was paused", got)
		}
		e.sh(t, a, "user", "echo after-resume > /mnt/data/p")
		if got := e.sh(t, b, "user", "cat /home/user/shared/p"); got != "after-resume" {
			t.Fatalf("B reads %q after A's resume", got)
		}
	})

	t.Run("snapshot", func(t *testing.T) {
		// A create from a named snapshot mounts the snapshot's volumes (its
		// memory image holds them): the same volume, live.
		r := e.api(t, http.MethodPost, "/sandboxes/"+a.SandboxID+"/snapshots", map[string]any{"name": "e2evol-snap-" + uniqueTag(t)})
		if r.status != http.StatusCreated {
			t.Fatalf("snapshot: %d %s", r.status, r.body)
		}
		snapID, _ := mustMap(t, r)["snapshotID"].(string)
		t.Cleanup(func() { e.api(t, http.MethodDelete, "/templates/"+snapID, nil) })
		r = e.api(t, http.MethodPost, "/sandboxes", map[string]any{"templateID": snapID, "timeout": 120, "secure": true})
		if r.status != http.StatusCreated {
			t.Fatalf("create from snapshot: %d %s", r.status, r.body)
		}
		var s sandboxInfo
		r.json(t, &s)
		t.Cleanup(func() { e.kill(s.SandboxID) })
		e.sh(t, b, "user", "echo after-snapshot > /home/user/shared/s")
		if got := e.sh(t, s, "user", "cat /mnt/data/s"); got != "after-snapshot" {
			t.Fatalf("sandbox from the snapshot reads %q, want B's later write", got)
		}
	})

	t.Run("daemon-sigkill", func(t *testing.T) {
		// What a sandbox fsynced before the daemon's SIGKILL is kept, and
		// the mounts of running sandboxes outlive the daemon (re-attached).
		e.sh(t, a, "user", "echo durable > /mnt/data/k && sync /mnt/data/k")
		restartDaemon(t, e, func() {
			if b, err := os.ReadFile(filepath.Join(hostDir, "k")); err != nil || string(b) != "durable\n" {
				t.Errorf("while the daemon is down the host reads %q %v", b, err)
			}
		})
		e.sh(t, b, "user", "echo after-restart >> /home/user/shared/k")
		if got := e.sh(t, a, "user", "cat /mnt/data/k"); got != "durable\nafter-restart" {
			t.Fatalf("after the daemon's restart A reads %q", got)
		}
	})

	t.Run("fork", func(t *testing.T) {
		r := e.api(t, http.MethodPost, "/sandboxes/"+a.SandboxID+"/fork", map[string]any{"count": 1, "timeout": 120})
		if r.status != http.StatusCreated {
			t.Fatalf("fork: %d %s", r.status, r.body)
		}
		var kids []struct {
			Sandbox map[string]any  `json:"sandbox"`
			Error   json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(r.body, &kids); err != nil || len(kids) != 1 || kids[0].Sandbox == nil {
			t.Fatalf("fork result: %s (%v)", r.body, err)
		}
		kid := sandboxInfo{SandboxID: kids[0].Sandbox["sandboxID"].(string)}
		kid.EnvdAccessToken, _ = kids[0].Sandbox["envdAccessToken"].(string)
		t.Cleanup(func() { e.kill(kid.SandboxID) })
		if got := e.sh(t, kid, "user", "cat /mnt/data/p"); got != "after-resume" {
			t.Fatalf("fork child reads %q", got)
		}
		e.sh(t, kid, "user", "echo from-child > /mnt/data/c")
		for _, s := range []struct {
			sb   sandboxInfo
			path string
		}{{a, "/mnt/data/c"}, {b, "/home/user/shared/c"}} {
			if got := e.sh(t, s.sb, "user", "cat "+s.path); got != "from-child" {
				t.Fatalf("%s reads %q, want the child's write (the same volume, not a copy)", s.sb.SandboxID, got)
			}
		}
	})
}

// TestVolumeMountRefused: an unknown volume and a mount over /proc are
// refused with 400 and no sandbox.
func TestVolumeMountRefused(t *testing.T) {
	e := loadEnv(t)
	name, _ := newTestVolume(t, 16)
	for _, tc := range []struct{ name, path string }{
		{"e2evol-not-there", "/mnt/x"},
		{name, "/proc/x"},
		{name, "relative"},
	} {
		r := e.api(t, http.MethodPost, "/sandboxes", map[string]any{
			"templateID": "base", "timeout": 60,
			"volumeMounts": []map[string]string{{"name": tc.name, "path": tc.path}},
		})
		if r.status != http.StatusBadRequest {
			var s sandboxInfo
			if json.Unmarshal(r.body, &s) == nil && s.SandboxID != "" {
				e.kill(s.SandboxID)
			}
			t.Errorf("mount %s at %s: %d %s, want 400", tc.name, tc.path, r.status, r.body)
		}
	}
}

// TestVolumeDeletedWhileMounted: deleting a volume that a sandbox mounts
// (E2B allows it) empties the sandbox's mount; the sandbox goes on, and once
// it is killed nothing of the volume is left on the host (no mount, no loop
// device).
func TestVolumeDeletedWhileMounted(t *testing.T) {
	e := loadEnv(t)
	data := os.Getenv("AIRLOCK_E2E_DATA_DIR")
	name, id, _ := newTestVolumeID(t, 32)
	s := e.createWithVolumes(t, map[string]string{"/mnt/v": name})
	e.sh(t, s, "user", "echo gone-soon > /mnt/v/f")
	if r := e.api(t, http.MethodDelete, "/volumes/"+id, nil); r.status != http.StatusNoContent {
		t.Fatalf("DELETE /volumes/%s: %d %s", id, r.status, r.body)
	}
	if got := e.sh(t, s, "user", "ls -A /mnt/v | wc -l"); got != "0" {
		t.Fatalf("the sandbox still lists %s file(s) of the deleted volume", got)
	}
	res := e.run(t, s, "user", "echo after > /mnt/v/g", time.Minute)
	t.Logf("a write into the deleted volume's mount: exit %d %q", res.exitCode, res.stderr)
	e.sh(t, s, "user", "echo fine")
	e.kill(s.SandboxID)
	img := filepath.Join(data, "volumes", id, "disk.img")
	if !waitFor(30*time.Second, 200*time.Millisecond, func() bool {
		files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		for _, f := range files {
			if b, _ := os.ReadFile(f); strings.HasPrefix(strings.TrimSpace(string(b)), img) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("a loop device still backs %s after the sandbox was killed", img)
	}
	if _, err := os.Stat(filepath.Join(data, "volumes", id)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the volume's directory is left: %v", err)
	}
}
