//go:build e2e

package gohttp

// Disk full on the data dir (issue 7, scope 3). A second daemon runs on a
// copy of the test data dir whose sandboxes/ is a small tmpfs; the test fills
// it from the host and checks that creates, uploads and pauses are refused
// with a clear 507 (never a hang or a half-created sandbox), that the running
// sandbox keeps working, and that everything works again once space returns.
// The real machine's disk is never filled. Subtest names start with "fault/"
// for bench/report.

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	diskFullTmpfsMB   = 48
	diskFullReserveMB = 1 // small, so that a create can pass the check and still run out of space in mkfs
)

// diskFullDaemon is a private `airlock serve` for this test.
type diskFullDaemon struct {
	env
	dataDir, sandboxes string
	netPrefix          string
	cmd                *exec.Cmd
}

// diskFullNet derives the second daemon's --net-prefix and --subnet from the
// suite's own (so parallel suites on one host never collide): prefix "x" +
// the suite's, and the top /24 of the suite's pool (the suite's daemon
// allocates slots lowest first).
func diskFullNet(t *testing.T) (string, string) {
	t.Helper()
	prefix := "x" + netPrefix()
	if len(prefix) > 10 {
		t.Fatalf("net prefix %q too long for the disk-full daemon", prefix)
	}
	subnet := os.Getenv("AIRLOCK_E2E_SUBNET")
	if subnet == "" {
		subnet = "10.79.0.0/16"
	}
	p, err := netip.ParsePrefix(subnet)
	if err != nil || !p.Addr().Is4() || p.Bits() > 16 {
		t.Fatalf("AIRLOCK_E2E_SUBNET %q: want an IPv4 /16 or larger", subnet)
	}
	a := p.Masked().Addr().As4()
	return prefix, netip.PrefixFrom(netip.AddrFrom4([4]byte{a[0], a[1], 254, 0}), 24).String()
}

func startDiskFullDaemon(t *testing.T) *diskFullDaemon {
	t.Helper()
	// A tmpfs left mounted by an interrupted run (the data dir is emptied
	// next).
	_ = syscall.Unmount(filepath.Join(filepath.Clean(os.Getenv("AIRLOCK_E2E_DATA_DIR"))+".diskfull", "sandboxes"), syscall.MNT_DETACH)
	var sandboxes string
	sd := startSecondDaemon(t, secondDaemonOpts{Name: "diskfull", Templates: []string{"base"}, Letter: "x", Below: 0,
		APIKey: "e2b_" + strings.Repeat("d15cf011", 5), Healthy: 3 * time.Minute,
		Args: []string{"--templates", "base", "--disk-reserve-mb", strconv.Itoa(diskFullReserveMB)},
		Prepare: func(dataDir string) {
			// sandboxes/ is a small tmpfs (the data dir was emptied, but a
			// mount left by an interrupted run would have kept its files).
			sandboxes = filepath.Join(dataDir, "sandboxes")
			if err := os.MkdirAll(sandboxes, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mount("tmpfs", sandboxes, "tmpfs", 0, "size="+strconv.Itoa(diskFullTmpfsMB)+"m,mode=0755"); err != nil {
				t.Fatalf("mounting a %d MiB tmpfs on %s: %v", diskFullTmpfsMB, sandboxes, err)
			}
			t.Cleanup(func() {
				if err := syscall.Unmount(sandboxes, 0); err != nil {
					t.Errorf("unmounting %s: %v (a sandbox mount left behind?)", sandboxes, err)
					_ = syscall.Unmount(sandboxes, syscall.MNT_DETACH)
				}
			})
		}})
	return &diskFullDaemon{env: sd.env, dataDir: sd.dataDir, sandboxes: sandboxes, netPrefix: sd.netPrefix, cmd: sd.cmd}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// templateHash finds the directory of the named template in a data dir.
func templateHash(t *testing.T, dataDir, name string) string {
	t.Helper()
	metas, _ := filepath.Glob(filepath.Join(dataDir, "templates", "*", "meta.json"))
	var best string
	var bestAt time.Time
	for _, m := range metas {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		var meta struct {
			Name      string    `json:"name"`
			CreatedAt time.Time `json:"createdAt"`
		}
		if json.Unmarshal(b, &meta) == nil && meta.Name == name && meta.CreatedAt.After(bestAt) {
			best, bestAt = filepath.Base(filepath.Dir(m)), meta.CreatedAt
		}
	}
	if best == "" {
		t.Fatalf("no %q template in %s", name, dataDir)
	}
	return best
}

// fill writes a file on the tmpfs until it is full and returns its path.
func (d *diskFullDaemon) fill(t *testing.T) string {
	t.Helper()
	p := filepath.Join(d.sandboxes, ".filler")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = 0xA5
	}
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", p, err)
			}
			break
		}
	}
	// Fill the last partial MiB too.
	for {
		if _, err := f.Write(buf[:4096]); err != nil {
			break
		}
	}
	return p
}

// freeMB is the free space on the tmpfs.
func (d *diskFullDaemon) freeMB(t *testing.T) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(d.sandboxes, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize >> 20
}

// sandboxDirs lists the sandbox directories on the tmpfs.
func (d *diskFullDaemon) sandboxDirs() []string {
	ents, _ := os.ReadDir(d.sandboxes)
	var out []string
	for _, en := range ents {
		if en.IsDir() {
			out = append(out, en.Name())
		}
	}
	return out
}

func (d *diskFullDaemon) netns() []string {
	ents, _ := os.ReadDir("/var/run/netns")
	var out []string
	for _, en := range ents {
		if strings.HasPrefix(en.Name(), d.netPrefix+"-") {
			out = append(out, en.Name())
		}
	}
	return out
}

// want507 asserts an E2B error body with status 507 that says the host's
// disk is full.
func want507(t *testing.T, what string, status int, body []byte) {
	t.Helper()
	var eb struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if status != http.StatusInsufficientStorage || json.Unmarshal(body, &eb) != nil || eb.Code != http.StatusInsufficientStorage ||
		!strings.Contains(eb.Message, "the host's disk is full") {
		t.Fatalf("%s on a full disk: %d %s; want 507 {code:507, message: \"…the host's disk is full…\"}", what, status, body)
	}
}

func TestHostDiskFull(t *testing.T) {
	d := startDiskFullDaemon(t)
	e := d.env

	// A sandbox running before the disk fills up, with a file in it.
	running := e.createV1(t, 600, nil)
	if r := e.runSteady(t, running, "", "echo before > ~/f && cat ~/f", time.Minute); r.stdout != "before\n" {
		t.Fatalf("sandbox before the disk filled: %+v", r)
	}

	filler := d.fill(t)
	t.Logf("tmpfs full: %d MiB free", d.freeMB(t))
	dirsBefore := d.sandboxDirs()

	t.Run("fault/disk-full-create-refused", func(t *testing.T) {
		begin := time.Now()
		r := e.api(t, http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "timeout": 60, "secure": true})
		want507(t, "create", r.status, r.body)
		t.Logf("create refused in %v: %s", time.Since(begin).Round(time.Millisecond), r.body)
		if got := d.sandboxDirs(); len(got) != len(dirsBefore) {
			t.Errorf("refused create left sandbox dirs: %v (before %v)", got, dirsBefore)
		}
		if ns := d.netns(); len(ns) != 1 {
			t.Errorf("netns after a refused create: %v, want only the running sandbox's", ns)
		}
		if ids := e.listedRunning(t); len(ids) != 1 || !ids[running.SandboxID] {
			t.Errorf("listed after a refused create: %v", ids)
		}
	})

	t.Run("fault/disk-full-running-sandbox-keeps-working", func(t *testing.T) {
		if r := e.runSteady(t, running, "", "cat ~/f; echo alive", time.Minute); r.stdout != "before\nalive\n" {
			t.Fatalf("running sandbox on a full host disk: %+v", r)
		}
	})

	t.Run("fault/disk-full-upload-refused", func(t *testing.T) {
		st, body := e.uploadOctet(t, running, "/home/user/up.txt", "user", strings.NewReader("upload"))
		want507(t, "upload", st, body)
		if r := e.runSteady(t, running, "", "test -e ~/up.txt && echo present || echo absent", time.Minute); r.stdout != "absent\n" {
			t.Errorf("refused upload left a file: %q", r.stdout)
		}
	})

	t.Run("fault/disk-full-pause-refused", func(t *testing.T) {
		r := e.api(t, http.MethodPost, "/sandboxes/"+running.SandboxID+"/pause", nil)
		want507(t, "pause", r.status, r.body)
		if st, state := e.sandboxState(t, running.SandboxID); st != http.StatusOK || state != "running" {
			t.Fatalf("after a refused pause: %d %q, want 200 running", st, state)
		}
		if r := e.runSteady(t, running, "", "echo still", time.Minute); r.stdout != "still\n" {
			t.Fatalf("sandbox after a refused pause: %+v", r)
		}
	})

	t.Run("fault/disk-full-mid-create", func(t *testing.T) {
		// Just above the reserve but not enough for the new sandbox's disk
		// image (mkfs of its sparse layer writes ~4.2 MiB): the create runs
		// into ENOSPC half-way, answers 507 and undoes everything.
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		leave := int64(diskFullReserveMB + 1)
		if err := os.WriteFile(filler, make([]byte, (d.freeMB(t)-leave)<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d MiB free (reserve %d MiB)", d.freeMB(t), diskFullReserveMB)
		r := e.api(t, http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "timeout": 60, "secure": true})
		want507(t, "create running out of space", r.status, r.body)
		t.Logf("create that ran out of space: %s", r.body)
		if !waitFor(30*time.Second, 200*time.Millisecond, func() bool { return len(d.sandboxDirs()) == len(dirsBefore) && len(d.netns()) == 1 }) {
			t.Errorf("create that ran out of space left dirs %v, netns %v", d.sandboxDirs(), d.netns())
		}
	})

	t.Run("fault/disk-full-pause-image-does-not-fit", func(t *testing.T) {
		// Room above the reserve, but not for the memory image of a
		// sandbox holding 8 MiB in /dev/shm: a gVisor checkpoint that
		// cannot write its image stops the sandbox, so the pause must be
		// refused before it starts.
		if r := e.runSteady(t, running, "root", "head -c 8M /dev/urandom > /dev/shm/blob && md5sum < /dev/shm/blob > /root/blob.md5 && echo ok", time.Minute); r.stdout != "ok\n" {
			t.Fatalf("filling /dev/shm: %+v", r)
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		leave := int64(diskFullReserveMB + 4)
		if err := os.WriteFile(filler, make([]byte, (d.freeMB(t)-leave)<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		r := e.api(t, http.MethodPost, "/sandboxes/"+running.SandboxID+"/pause", nil)
		want507(t, "pause whose image does not fit", r.status, r.body)
		t.Logf("%d MiB free: %s", d.freeMB(t), r.body)
		if st, state := e.sandboxState(t, running.SandboxID); st != http.StatusOK || state != "running" {
			t.Fatalf("after a refused pause: %d %q, want 200 running", st, state)
		}
		if r := e.runSteady(t, running, "", "cat ~/f", time.Minute); r.stdout != "before\n" {
			t.Fatalf("sandbox after a refused pause: %+v", r)
		}
	})

	t.Run("fault/disk-full-recovers", func(t *testing.T) {
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		s := e.createV1(t, 120, nil)
		if r := e.runSteady(t, s, "", "echo new", time.Minute); r.stdout != "new\n" {
			t.Fatalf("create after space returned: %+v", r)
		}
		if st, body := e.uploadOctet(t, running, "/home/user/up.txt", "user", strings.NewReader("upload")); st != http.StatusOK {
			t.Fatalf("upload after space returned: %d %s", st, body)
		}
		if r := e.api(t, http.MethodPost, "/sandboxes/"+running.SandboxID+"/pause", nil); r.status != http.StatusNoContent {
			t.Fatalf("pause after space returned: %d %s", r.status, r.body)
		}
		if r := e.api(t, http.MethodPost, "/sandboxes/"+running.SandboxID+"/resume", map[string]any{"timeout": 300}); r.status != http.StatusCreated {
			t.Fatalf("resume: %d %s", r.status, r.body)
		}
		if r := e.runSteady(t, running, "root", "cat /home/user/f /home/user/up.txt; md5sum < /dev/shm/blob | cmp - /root/blob.md5 && echo same", time.Minute); r.stdout != "before\nuploadsame\n" {
			t.Fatalf("sandbox after pause/resume: %+v", r)
		}
		e.kill(s.SandboxID)
		e.kill(running.SandboxID)
		if !waitFor(60*time.Second, 500*time.Millisecond, func() bool { return len(d.sandboxDirs()) == 0 && len(d.netns()) == 0 }) {
			t.Errorf("after killing everything: dirs %v, netns %v", d.sandboxDirs(), d.netns())
		}
	})
}
