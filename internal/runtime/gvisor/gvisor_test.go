//go:build linux

package gvisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

const helperEnv = "AIRLOCK_GVISOR_TEST_HELPER"

type helperReq struct {
	Root string
	Spec runtime.Spec
}

// runHelper is the body of a child "daemon" process that starts a sandbox
// and then waits to be SIGKILLed by the test.
func runHelper() {
	var req helperReq
	if err := json.Unmarshal([]byte(os.Getenv(helperEnv)), &req); err != nil {
		fmt.Println("bad request:", err)
		os.Exit(2)
	}
	r, err := New(Config{Root: req.Root}, nil)
	if err == nil {
		err = r.Start(context.Background(), req.Spec)
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("started")
	time.Sleep(time.Minute)
	os.Exit(0)
}

func TestSandboxLifecycle(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := newRuntime(t, filepath.Join(t.TempDir(), "runsc"))
	spec := testSpec(t, "lifecycle1", newNetNS(t, "lc"))
	spec.Resources = runtime.Resources{CPUCount: 1, MemoryMB: 128, PIDs: 64, DiskMB: 64}
	before := treeDigest(t, fixture.rootfs)

	if err := r.Start(ctx, spec); err != nil {
		t.Fatalf("Start: %v", err)
	}
	destroyed := false
	t.Cleanup(func() {
		if !destroyed {
			_ = r.Destroy(context.Background(), spec.ID, spec.Dir)
		}
	})
	if err := waitHealthy(ctx); err != nil {
		t.Fatalf("%v\nagent.log: %s", err, runtime.LogTail(AgentLogPath(spec.Dir), 4096))
	}

	if st, err := r.State(ctx, spec.ID); err != nil || st != runtime.StateRunning {
		t.Errorf("State = %q, %v; want running", st, err)
	}
	if ids, err := r.List(ctx); err != nil || !slices.Contains(ids, spec.ID) {
		t.Errorf("List = %v, %v; want it to contain %s", ids, err, spec.ID)
	}

	t.Run("pid namespace", func(t *testing.T) {
		_, out := guestRun(t, "ls /proc")
		var pids []int
		for _, f := range strings.Fields(out) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
		if len(pids) == 0 || len(pids) > 10 {
			t.Errorf("guest sees pids %v, want a handful of its own", pids)
		}
		_, cmdline := guestRun(t, "tr '\\0' ' ' < /proc/1/cmdline")
		if !strings.Contains(cmdline, runtime.AgentGuestPath) {
			t.Errorf("pid 1 is %q, want the agent", cmdline)
		}
	})

	t.Run("gvisor kernel", func(t *testing.T) {
		_, dmesg := guestRun(t, "dmesg")
		if !strings.Contains(dmesg, "gVisor") {
			t.Errorf("dmesg does not mention gVisor: %q", dmesg)
		}
		var u syscall.Utsname
		if err := syscall.Uname(&u); err != nil {
			t.Fatal(err)
		}
		hostRel := utsString(u.Release[:])
		_, rel := guestRun(t, "uname -r")
		if strings.TrimSpace(rel) == hostRel {
			t.Errorf("guest kernel release %q equals host's", rel)
		}
	})

	t.Run("guest files", func(t *testing.T) {
		checks := map[string]string{
			"hostname":             "sbx-lifecycle",
			"cat /etc/hostname":    "sbx-lifecycle",
			"cat /etc/hosts":       "10.99.0.1 airlock-host",
			"cat /etc/resolv.conf": "nameserver 10.99.0.1",
			"echo $AIRLOCK_TEST":   "1",
			"id -u":                "0",
		}
		for cmd, want := range checks {
			if code, out := guestRun(t, cmd); code != 0 || !strings.Contains(out, want) {
				t.Errorf("%s = %d %q, want %q", cmd, code, out, want)
			}
		}
		if code, out := guestRun(t, "echo x >> "+runtime.AgentGuestPath); code == 0 {
			t.Errorf("agent binary is writable inside the sandbox: %q", out)
		}
	})

	t.Run("writes land in upper", func(t *testing.T) {
		if code, out := guestRun(t, "echo hello > /tmp/marker && echo bye > /etc/newfile && rm /bin/true"); code != 0 {
			t.Fatalf("write failed: %d %q", code, out)
		}
		b, err := os.ReadFile(filepath.Join(UpperDir(spec.Dir), "tmp/marker"))
		if err != nil || string(b) != "hello\n" {
			t.Errorf("upper/tmp/marker = %q, %v", b, err)
		}
		if _, err := os.Stat(filepath.Join(fixture.rootfs, "tmp/marker")); !os.IsNotExist(err) {
			t.Errorf("marker leaked into the template: %v", err)
		}
		if _, err := os.Lstat(filepath.Join(fixture.rootfs, "bin/true")); err != nil {
			t.Errorf("deleting inside removed the template file: %v", err)
		}
		if after := treeDigest(t, fixture.rootfs); after != before {
			t.Errorf("template changed")
		}
		if _, err := os.Lstat("/etc/host-resolv.conf"); err == nil {
			t.Errorf("resolv.conf was written through the template's symlink")
		}
	})

	t.Run("disk limit", func(t *testing.T) {
		code, out := guestRun(t, "dd if=/dev/zero of=/root/big bs=1M count=100")
		if code == 0 || !strings.Contains(out, "No space left") {
			t.Errorf("writing 100 MiB into a 64 MiB layer: %d %q", code, out)
		}
		st, err := r.Stats(ctx, spec.ID, spec.Dir)
		if err != nil {
			t.Fatal(err)
		}
		if st.DiskUsed < 50<<20 || st.DiskLimit < 50<<20 || st.DiskLimit > 64<<20 {
			t.Errorf("disk used %d limit %d, want ~64 MiB both", st.DiskUsed, st.DiskLimit)
		}
		guestRun(t, "rm -f /root/big")
	})

	t.Run("pids limit", func(t *testing.T) {
		code, out := guestRun(t, runtime.AgentGuestPath+" -spawn 100")
		var started, failed int
		if _, err := fmt.Sscanf(out, "started %d failed %d", &started, &failed); err != nil || code != 0 {
			t.Fatalf("spawn: %d %q", code, out)
		}
		if failed == 0 || started > 64 {
			t.Errorf("starting 100 processes under a 64-process limit: %s", out)
		}
		t.Logf("pids: %s", strings.TrimSpace(out))
	})

	t.Run("stats", func(t *testing.T) {
		st, err := r.Stats(ctx, spec.ID, spec.Dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("stats: %+v", st)
		if st.MemoryUsed == 0 || st.CPUUsageNs == 0 || st.PIDs == 0 {
			t.Errorf("zero stats: %+v", st)
		}
		if st.MemoryLimit != 128<<20 {
			t.Errorf("memory limit %d, want %d", st.MemoryLimit, 128<<20)
		}
		if st.DiskUsed == 0 || st.DiskUsed > 16<<20 {
			t.Errorf("disk used %d after cleanup, want small but non-zero", st.DiskUsed)
		}
	})

	// Last: exceeding the host limit (memory + hostMemoryOverhead + the
	// OOM guard's headroom: 960 MiB here) kills the whole sandbox, so
	// nothing can run in it afterwards. (This test agent has no OOM guard;
	// airlock-envd's would kill a process over 128 MiB first.)
	t.Run("memory limit", func(t *testing.T) {
		if code, out := guestRun(t, runtime.AgentGuestPath+" -hog 32"); code != 0 {
			t.Errorf("allocating 32 MiB failed: %d %q", code, out)
		}
		c := &http.Client{Timeout: 15 * time.Second}
		resp, err := c.Get(guest.URL(guestIP, guest.EnvdPort, "/run?cmd=") + url.QueryEscape(runtime.AgentGuestPath+" -hog 1200"))
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(body), `"exit":0`) {
				return // the allocating process alone failed: fine too
			}
			t.Fatalf("allocating 1200 MiB under a 960 MiB host limit succeeded: %s", body)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			st, err := r.State(ctx, spec.ID)
			if err != nil {
				t.Fatal(err)
			}
			if st != runtime.StateRunning {
				t.Logf("sandbox state after exceeding its memory: %s", st)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("hog request failed (%v) but the sandbox still runs", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	if t.Failed() {
		t.Logf("agent.log: %s", runtime.LogTail(AgentLogPath(spec.Dir), 4096))
	}
	if err := r.Destroy(ctx, spec.ID, spec.Dir); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	destroyed = true
	assertGone(t, r, spec.ID, spec.Dir)
	if ids, err := r.List(ctx); err != nil || slices.Contains(ids, spec.ID) {
		t.Errorf("List after destroy = %v, %v", ids, err)
	}
	if err := r.Destroy(ctx, spec.ID, spec.Dir); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
	if _, err := r.Stats(ctx, spec.ID, ""); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Stats after destroy = %v, want ErrNotFound", err)
	}
}

// TestSurvivesDaemonKill starts a sandbox from a child process, SIGKILLs
// that process, and re-attaches with a new Runtime over the same root.
func TestSurvivesDaemonKill(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := filepath.Join(t.TempDir(), "runsc")
	spec := testSpec(t, "survivor1", newNetNS(t, "sv"))
	req, _ := json.Marshal(helperReq{Root: root, Spec: spec})

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(req))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "started" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper: %q", line)
	}
	r := newRuntime(t, root)
	t.Cleanup(func() { _ = r.Destroy(context.Background(), spec.ID, spec.Dir) })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	if err := waitHealthy(ctx); err != nil {
		t.Fatalf("after the daemon died: %v", err)
	}
	ids, err := r.List(ctx)
	if err != nil || !slices.Contains(ids, spec.ID) {
		t.Fatalf("new runtime List = %v, %v", ids, err)
	}
	if st, err := r.State(ctx, spec.ID); err != nil || st != runtime.StateRunning {
		t.Errorf("State = %q, %v", st, err)
	}
	if err := r.Destroy(ctx, spec.ID, spec.Dir); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	assertGone(t, r, spec.ID, spec.Dir)
}

func TestStartRejectsBadSpec(t *testing.T) {
	needRoot(t)
	r := newRuntime(t, filepath.Join(t.TempDir(), "runsc"))
	ns := newNetNS(t, "bad")
	cases := map[string]func(*runtime.Spec){
		"bad id":      func(s *runtime.Spec) { s.ID = "../evil" },
		"no rootfs":   func(s *runtime.Spec) { s.RootFS = "/nonexistent" },
		"no agent":    func(s *runtime.Spec) { s.AgentPath = "/nonexistent" },
		"no netns":    func(s *runtime.Spec) { s.NetNSPath = "" },
		"relative":    func(s *runtime.Spec) { s.Dir = "rel/dir" },
		"negative":    func(s *runtime.Spec) { s.Resources.MemoryMB = -1 },
		"missing ns":  func(s *runtime.Spec) { s.NetNSPath = "/var/run/netns/altestg-none" },
		"upper id":    func(s *runtime.Spec) { s.ID = "UPPER" },
		"host netns":  func(s *runtime.Spec) { s.NetNSPath = "/proc/1/ns/net" },
		"not a netns": func(s *runtime.Spec) { s.NetNSPath = "/etc/hostname" },
	}
	for name, mod := range cases {
		spec := testSpec(t, "bad1", ns)
		mod(&spec)
		err := r.Start(context.Background(), spec)
		if !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: err = %v, want ErrInvalidSpec", name, err)
		}
		if spec.Dir != "" && filepath.IsAbs(spec.Dir) {
			if _, err := os.Stat(spec.Dir); !os.IsNotExist(err) {
				t.Errorf("%s: dir created", name)
			}
		}
	}
}

// TestStartFailureCleansUp makes runsc fail after the overlay is mounted
// (the agent is not an executable) and checks nothing is left behind.
func TestStartFailureCleansUp(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := newRuntime(t, filepath.Join(t.TempDir(), "runsc"))
	spec := testSpec(t, "broken1", newNetNS(t, "br"))
	spec.AgentPath = filepath.Join(t.TempDir(), "not-a-binary")
	if err := os.WriteFile(spec.AgentPath, []byte("garbage"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := r.Start(ctx, spec)
	if err == nil {
		_ = r.Destroy(ctx, spec.ID, spec.Dir)
		t.Fatal("Start with a garbage agent succeeded")
	}
	t.Logf("Start error: %v", err)
	assertGone(t, r, spec.ID, spec.Dir)
}

// TestStartLatency measures Start → agent /health over several runs.
func TestStartLatency(t *testing.T) {
	needRoot(t)
	if testing.Short() {
		t.Skip("latency measurement skipped in -short mode")
	}
	const runs = 10
	r := newRuntime(t, filepath.Join(t.TempDir(), "runsc"))
	var startDur, healthDur, destroyDur []time.Duration
	for i := range runs {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			spec := testSpec(t, fmt.Sprintf("lat%d", i), newNetNS(t, fmt.Sprintf("l%d", i)))
			t0 := time.Now()
			if err := r.Start(ctx, spec); err != nil {
				t.Fatalf("Start: %v", err)
			}
			t1 := time.Now()
			herr := waitHealthy(ctx)
			t2 := time.Now()
			dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer dcancel()
			if err := r.Destroy(dctx, spec.ID, spec.Dir); err != nil {
				t.Fatalf("Destroy: %v", err)
			}
			if herr != nil {
				t.Fatal(herr)
			}
			destroyDur = append(destroyDur, time.Since(t2))
			startDur = append(startDur, t1.Sub(t0))
			healthDur = append(healthDur, t2.Sub(t0))
			assertGone(t, r, spec.ID, spec.Dir)
		})
	}
	if len(healthDur) < runs {
		t.Fatalf("only %d of %d runs succeeded", len(healthDur), runs)
	}
	t.Logf("Start p50 %v; Start→/health p50 %v (min %v, max %v); Destroy p50 %v",
		p50(startDur), p50(healthDur), slices.Min(healthDur), slices.Max(healthDur), p50(destroyDur))
	if p50(healthDur) > 5*time.Second {
		t.Errorf("Start→/health p50 %v is too slow", p50(healthDur))
	}
}

func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func utsString(b []int8) string {
	var s []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

func TestInCgroup(t *testing.T) {
	listing := "9:name=systemd:/airlock/abc\n8:pids:/airlock/abc\n0::/\n"
	if !inCgroup(listing, "/airlock/abc") {
		t.Error("process in /airlock/abc not found there")
	}
	if inCgroup(listing, "/airlock/ab") || inCgroup("8:pids:/airlock/abcd\n", "/airlock/abc") {
		t.Error("a prefix of the cgroup matched")
	}
}
