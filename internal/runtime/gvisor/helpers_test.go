//go:build linux

package gvisor

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

const (
	hostIP  = "10.99.0.1"
	guestIP = "10.99.0.2"
)

// fixture holds things built once for all tests.
var fixture struct {
	dir    string // temp dir removed by TestMain
	rootfs string // busybox template rootfs
	agent  string // static test agent
}

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		runHelper()
		return
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "gvisor tests need root (mounts, netns, runsc); running unit tests only")
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "altest-gvisor-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	fixture.dir = dir
	if err := buildFixture(dir); err != nil {
		fmt.Fprintln(os.Stderr, "building fixture:", err)
		return 1
	}
	return m.Run()
}

func buildFixture(dir string) error {
	fixture.agent = filepath.Join(dir, "agent")
	cmd := exec.Command("go", "build", "-o", fixture.agent, "./testdata/agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building agent: %w: %s", err, out)
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("busybox not installed (apt-get install busybox-static): %w", err)
	}
	fixture.rootfs = filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "tmp", "root", "usr/local/bin"} {
		if err := os.MkdirAll(filepath.Join(fixture.rootfs, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(fixture.rootfs, "tmp"), 0o1777); err != nil {
		return err
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(fixture.rootfs, "bin/busybox"), data, 0o755); err != nil {
		return err
	}
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %w", err)
	}
	for _, name := range strings.Fields(string(list)) {
		if name == "busybox" {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(fixture.rootfs, "bin", name)); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(fixture.rootfs, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		return err
	}
	// A template symlink that must not be written through.
	return os.Symlink("/etc/host-resolv.conf", filepath.Join(fixture.rootfs, "etc/resolv.conf"))
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts, network namespaces and runsc")
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// newRuntime returns a Runtime over a fresh runsc root.
func newRuntime(t *testing.T, root string) *Runtime {
	t.Helper()
	// AIRLOCK_GVISOR_DEBUG_DIR keeps runsc debug logs for investigation.
	r, err := New(Config{Root: root, DebugLogDir: os.Getenv("AIRLOCK_GVISOR_DEBUG_DIR")}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// newNetNS creates a named network namespace with a veth pair: host side
// altest<tag> at 10.99.0.1/30, guest side eth0 at 10.99.0.2/30. Returns the
// namespace path; cleanup removes both.
func newNetNS(t *testing.T, tag string) string {
	t.Helper()
	name := "altestg-" + tag
	hostLink := "altestg" + tag
	peer := "altestgp" + tag

	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name)
	if serr := netns.Set(orig); serr != nil {
		t.Fatalf("restoring netns: %v", serr)
	}
	if err != nil {
		t.Fatalf("creating netns: %v", err)
	}
	defer ns.Close()
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(hostLink); err == nil {
			_ = netlink.LinkDel(l)
		}
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("deleting netns: %v", err)
		}
	})

	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostLink}, PeerName: peer}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("adding veth: %v", err)
	}
	p, err := netlink.LinkByName(peer)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetNsFd(p, int(ns)); err != nil {
		t.Fatal(err)
	}
	hl, err := netlink.LinkByName(hostLink)
	if err != nil {
		t.Fatal(err)
	}
	mustAddr(t, nil, hl, hostIP+"/30")
	if err := netlink.LinkSetUp(hl); err != nil {
		t.Fatal(err)
	}

	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	gl, err := h.LinkByName(peer)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetName(gl, "eth0"); err != nil {
		t.Fatal(err)
	}
	mustAddr(t, h, gl, guestIP+"/30")
	if err := h.LinkSetUp(gl); err != nil {
		t.Fatal(err)
	}
	return filepath.Join("/var/run/netns", name)
}

func mustAddr(t *testing.T, h *netlink.Handle, l netlink.Link, cidr string) {
	t.Helper()
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		t.Fatal(err)
	}
	if h == nil {
		err = netlink.AddrAdd(l, a)
	} else {
		err = h.AddrAdd(l, a)
	}
	if err != nil {
		t.Fatalf("adding %s: %v", cidr, err)
	}
}

// testSpec returns a spec for sandbox id<suffix>; the suffix (this test
// process's pid) keeps ids unique on the host: runsc names its control
// sockets after the id in the abstract namespace, shared by all roots.
func testSpec(t *testing.T, id, netnsPath string) runtime.Spec {
	id = fmt.Sprintf("%s%d", id, os.Getpid())
	return runtime.Spec{
		ID:          id,
		RootFS:      fixture.rootfs,
		Dir:         filepath.Join(t.TempDir(), "sandboxes", id),
		NetNSPath:   netnsPath,
		AgentPath:   fixture.agent,
		Hostname:    "sbx-lifecycle",
		Nameservers: []string{"10.99.0.1"},
		Hosts:       []string{"10.99.0.1 airlock-host"},
		Env:         []string{"AIRLOCK_TEST=1"},
	}
}

var httpClient = &http.Client{Timeout: 90 * time.Second}

// waitHealthy polls the agent's /health until it answers 204.
func waitHealthy(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, guest.URL(guestIP, guest.EnvdPort, guest.PathHealth), nil)
		c := &http.Client{Timeout: 200 * time.Millisecond}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent not healthy: %w (last: %v)", ctx.Err(), err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// guestRun runs a shell command in the sandbox via the test agent.
func guestRun(t *testing.T, cmd string) (int, string) {
	t.Helper()
	resp, err := httpClient.Get(guest.URL(guestIP, guest.EnvdPort, "/run?cmd=") + url.QueryEscape(cmd))
	if err != nil {
		t.Fatalf("running %q: %v", cmd, err)
	}
	defer resp.Body.Close()
	var res struct {
		Exit   int    `json:"exit"`
		Output string `json:"output"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		t.Fatalf("decoding result of %q: %v", cmd, err)
	}
	return res.Exit, res.Output
}

// treeDigest describes every entry of a directory tree (path, mode, size,
// mtime, symlink target) so that any change shows up as a difference.
func treeDigest(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		target, _ := os.Readlink(p)
		fmt.Fprintf(&b, "%s %v %d %d %s\n", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano(), target)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// assertGone checks that nothing of sandbox id remains on the host.
func assertGone(t *testing.T, r *Runtime, id, dir string) {
	t.Helper()
	if mps, err := mountsUnder(dir); err != nil || len(mps) > 0 {
		t.Errorf("mounts left under %s: %v %v", dir, mps, err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("sandbox dir still exists: %v", err)
	}
	if r.known(id) {
		t.Errorf("runsc state for %s still exists", id)
	}
	if _, err := r.State(context.Background(), id); err != runtime.ErrNotFound {
		t.Errorf("State after destroy = %v, want ErrNotFound", err)
	}
	if m, _ := filepath.Glob("/sys/fs/cgroup/*/airlock/" + id); len(m) > 0 {
		t.Errorf("cgroups left: %v", m)
	}
}
