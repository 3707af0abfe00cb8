//go:build linux

package template

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestBuildBaseReal builds the real `base` template with mmdebstrap from the
// host's Debian mirror (about 30 s here) and checks what the SDKs rely on.
func TestBuildBaseReal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mmdebstrap --mode=root")
	}
	if testing.Short() {
		t.Skip("-short: skipping the real template build")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	st := newFakeStore()
	m := NewManager(dir, st, quietLog())

	var (
		mu     sync.Mutex
		phases = map[string]int{}
		order  []string
		lines  strings.Builder
	)
	printer := TerminalProgress(&lines)
	start := time.Now()
	tpl, err := m.Ensure(ctx, "base", func(p Progress) {
		printer(p)
		mu.Lock()
		defer mu.Unlock()
		if phases[p.Phase] == 0 {
			order = append(order, p.Phase)
		}
		phases[p.Phase]++
	})
	if err != nil {
		t.Fatalf("Ensure(base): %v", err)
	}
	took := time.Since(start)
	t.Logf("built base in %s: %s, %d bytes (%.0f MiB)", took.Round(time.Millisecond), tpl.Hash, tpl.SizeBytes, float64(tpl.SizeBytes)/(1<<20))
	t.Logf("progress phases %v, counts %v; plain output:\n%s", order, phases, lines.String())
	if want := []string{PhaseDownload, PhaseExtract, PhaseInstall, PhaseCustomize, PhaseFinalize}; strings.Join(order, ",") != strings.Join(want, ",") {
		t.Errorf("phases %v, want %v", order, want)
	}
	if tpl.SizeBytes < 50<<20 || tpl.SizeBytes > 600<<20 {
		t.Errorf("implausible size %d", tpl.SizeBytes)
	}
	if mp, err := mountsBelow(dir); err != nil || len(mp) != 0 {
		t.Errorf("mounts left below data dir: %v %v", mp, err)
	}
	noTmpLeft(t, dir)

	root := tpl.RootFS
	for _, p := range []string{
		"usr/bin/bash", "usr/bin/python3", "usr/bin/python", "usr/bin/git", "usr/lib/git-core/git-daemon",
		"usr/bin/tput", "usr/bin/sudo", "usr/bin/curl", "usr/bin/ps", "usr/bin/ip", "usr/bin/ping",
		"usr/bin/less", "usr/bin/unzip", "usr/bin/xz", "etc/ssl/certs/ca-certificates.crt", "etc/services",
	} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("missing /%s: %v", p, err)
		}
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(passwd), "\nuser:x:1000:1000::/home/user:/bin/bash\n") {
		t.Errorf("/etc/passwd lacks user 1000:\n%s", passwd)
	}
	if !strings.Contains(string(passwd), "root:x:0:0:root:/root:/bin/bash") {
		t.Errorf("/etc/passwd root entry:\n%s", passwd)
	}
	fi, err := os.Stat(filepath.Join(root, "etc/sudoers.d/user"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o440 {
		t.Errorf("/etc/sudoers.d/user mode %v", fi.Mode())
	}
	fi, err = os.Stat(filepath.Join(root, "home/user"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 1000 || fi.Mode().Perm() != 0o755 {
		t.Errorf("/home/user: uid %d gid %d mode %v", st.Uid, st.Gid, fi.Mode())
	}
	if fi, err := os.Stat(filepath.Join(root, "usr/local/bin")); err != nil || !fi.IsDir() {
		t.Errorf("/usr/local/bin: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/local/bin/airlock-envd")); err == nil {
		t.Errorf("agent baked into the template")
	}
	if _, err := os.Stat(filepath.Join(root, setupScriptName)); err == nil {
		t.Errorf("setup script left in the template")
	}
	if lists, _ := filepath.Glob(filepath.Join(root, "var/lib/apt/lists/*_Packages")); len(lists) != 0 {
		t.Errorf("apt lists not cleaned: %v", lists)
	}
	if debs, _ := filepath.Glob(filepath.Join(root, "var/cache/apt/archives/*.deb")); len(debs) != 0 {
		t.Errorf("apt cache not cleaned: %d debs", len(debs))
	}

	// Run the shell environment the agent will use (host kernel, chroot).
	script := `umask; python -c 'import ssl, sqlite3; print("py-ok")'; git --version; tput -T xterm colors; ` +
		`visudo -c -q && echo sudoers-ok; id user; echo "$LANG"`
	out, err := exec.CommandContext(ctx, "chroot", root, "/bin/bash", "-l", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("chroot check: %v\n%s", err, out)
	}
	for _, want := range []string{"0022\n", "py-ok\n", "git version 2.", "\n8\n", "sudoers-ok\n",
		"uid=1000(user) gid=1000(user) groups=1000(user),27(sudo)", "C.UTF-8"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("chroot output lacks %q:\n%s", want, out)
		}
	}

	// A second start (new manager, same data dir and store) is instant.
	start = time.Now()
	m2 := NewManager(dir, st, quietLog())
	tpl2, err := m2.Ensure(ctx, "base", nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("second Ensure took %s", d)
	} else {
		t.Logf("second Ensure took %s", d)
	}
	if tpl2.Hash != tpl.Hash || tpl2.SizeBytes != tpl.SizeBytes {
		t.Errorf("second Ensure = %+v, first %+v", tpl2, tpl)
	}
}

// TestBuildInterruptedLeavesNothing cancels a real build once packages are
// being installed (chroot mounts in place) and checks that no scratch dir,
// mount or process survives.
func TestBuildInterruptedLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mmdebstrap --mode=root")
	}
	if testing.Short() {
		t.Skip("-short: skipping the real template build")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	m := NewManager(dir, newFakeStore(), quietLog())
	var once sync.Once
	_, err := m.Build(ctx, "base", BuildOptions{}, func(p Progress) {
		if p.Phase == PhaseInstall && p.Done >= 5 {
			once.Do(cancel)
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Build = %v, want context.Canceled", err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "templates"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("templates dir not empty after interrupted build: %v", entries)
	}
	if mp, err := mountsBelow(dir); err != nil || len(mp) != 0 {
		t.Errorf("mounts left: %v %v", mp, err)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/root")
	for _, p := range procs {
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, dir) {
			t.Errorf("process %s still chrooted into the build", p)
		}
	}
}

// TestBuildCodeInterpreterReal builds `code-interpreter-v1` (large: several
// minutes) and checks the scientific stack imports. Opt-in with
// AIRLOCK_TEST_TEMPLATE_BUILD_CI=1.
func TestBuildCodeInterpreterReal(t *testing.T) {
	if os.Getenv("AIRLOCK_TEST_TEMPLATE_BUILD_CI") != "1" {
		t.Skip("set AIRLOCK_TEST_TEMPLATE_BUILD_CI=1 to build code-interpreter-v1 (several minutes)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: mmdebstrap --mode=root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir := t.TempDir()
	m := NewManager(dir, newFakeStore(), quietLog())
	start := time.Now()
	tpl, err := m.Ensure(ctx, "code-interpreter-v1", nil)
	if err != nil {
		t.Fatalf("Ensure(code-interpreter-v1): %v", err)
	}
	t.Logf("built code-interpreter-v1 in %s: %d bytes (%.0f MiB)", time.Since(start).Round(time.Millisecond), tpl.SizeBytes, float64(tpl.SizeBytes)/(1<<20))
	script := `python -c 'import numpy, pandas, matplotlib, scipy, sklearn, seaborn, ipykernel, jupyter_client, PIL, plotly, openpyxl, docx, bs4, requests, aiohttp; print("imports-ok")' && node --version && id user`
	out, err := exec.CommandContext(ctx, "chroot", tpl.RootFS, "/bin/bash", "-l", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("chroot check: %v\n%s", err, out)
	}
	for _, want := range []string{"imports-ok\n", "v18.", "uid=1000(user)"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
