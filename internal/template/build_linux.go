//go:build linux

package template

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/helperenv"
)

// dpkgFilters keep documentation, manual pages and translations out of
// templates (copyright files stay).
var dpkgFilters = []string{
	"path-exclude=/usr/share/doc/*",
	"path-include=/usr/share/doc/*/copyright",
	"path-exclude=/usr/share/man/*",
	"path-exclude=/usr/share/info/*",
	"path-exclude=/usr/share/locale/*",
	"path-include=/usr/share/locale/locale.alias",
	"path-exclude=/usr/share/lintian/*",
}

// setupScriptName is where the recipe's setup lines are uploaded in the chroot.
const setupScriptName = "/tmp/airlock-setup.sh"

// mmdebstrapArgs returns the mmdebstrap command line (after the binary)
// that builds r into rootfs, uploading the setup script from setupPath.
func mmdebstrapArgs(r *Recipe, rootfs, setupPath string, sources []aptSource) []string {
	args := []string{
		"--verbose",
		"--mode=root",
		"--variant=minbase",
		"--format=directory",
		"--include=" + strings.Join(r.spec().Packages, ","),
		"--aptopt=Acquire::Retries \"3\"",
		// The JDK's postinst links its man pages with update-alternatives
		// into /usr/share/man/man1, which the dpkg filters below keep from
		// existing, and fails without it (Debian #863199): create it before
		// the packages are installed. It stays empty.
		`--essential-hook=mkdir -p "$1/usr/share/man/man1"`,
	}
	for _, f := range dpkgFilters {
		args = append(args, "--dpkgopt="+f)
	}
	if len(r.Setup) > 0 {
		args = append(args,
			"--customize-hook=upload "+setupPath+" "+setupScriptName,
			`--customize-hook=chroot "$1" /bin/sh -e `+setupScriptName,
			`--customize-hook=rm -f "$1`+setupScriptName+`"`,
		)
	}
	args = append(args, r.Suite, rootfs)
	for _, s := range sources {
		args = append(args, s.line())
	}
	return args
}

// setupScript renders the recipe's setup lines as a POSIX shell script.
func setupScript(r *Recipe) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\nset -eu\nexport PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n")
	for _, l := range r.Setup {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// mmdebstrapBuild builds r into rootfs with mmdebstrap (root mode) inside a
// private mount namespace, so that an interrupted build leaves no mounts
// behind. rootfs must not exist yet; its parent is the scratch build dir.
func mmdebstrapBuild(ctx context.Context, r *Recipe, rootfs string, progress func(Progress)) error {
	if os.Geteuid() != 0 {
		return errors.New("building templates needs root (mmdebstrap --mode=root)")
	}
	mmdebstrap, err := exec.LookPath("mmdebstrap")
	if err != nil {
		return fmt.Errorf("mmdebstrap not found (apt-get install mmdebstrap): %w", err)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return fmt.Errorf("unshare not found (util-linux): %w", err)
	}
	// The setup script lives next to rootfs, outside the template tree.
	setupPath := filepath.Join(filepath.Dir(rootfs), "setup.sh")
	if err := os.WriteFile(setupPath, []byte(setupScript(r)), 0o644); err != nil {
		return fmt.Errorf("writing setup script: %w", err)
	}
	defer os.Remove(setupPath)
	sources := hostSources("/", r.Suite)
	args := append([]string{"--mount", "--propagation", "private", "--", mmdebstrap},
		mmdebstrapArgs(r, rootfs, setupPath, sources)...)
	cmd := exec.CommandContext(ctx, unshare, args...)
	// A minimal environment (never the daemon's credentials), with the
	// operator's proxy settings for apt, and TMPDIR and APT_CONFIG, which
	// mmdebstrap honours.
	pass := helperenv.Pass(append([]string{"TMPDIR", "APT_CONFIG"}, helperenv.ProxyVars...)...)
	cmd.Env = helperenv.Env(append(pass, "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C.UTF-8")...)
	cmd.Stdin = nil
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		// Kill mmdebstrap and everything it started (apt, dpkg, hooks).
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = 10 * time.Second

	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("creating output pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("starting mmdebstrap: %w", err)
	}
	pw.Close()

	parser := newOutputParser(progress)
	tail := make([]string, 0, 40)
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		l := sc.Text()
		parser.line(l)
		if len(tail) == cap(tail) {
			copy(tail, tail[1:])
			tail = tail[:len(tail)-1]
		}
		tail = append(tail, l)
	}
	pr.Close()
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("mmdebstrap failed: %w; last output:\n%s", err, strings.Join(tail, "\n"))
	}
	return nil
}
