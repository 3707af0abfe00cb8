//go:build linux

package imagebuild

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/ext4"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// DiskExporter is what a VM runtime offers the builder (microvm.Runtime).
type DiskExporter interface {
	// ExportRootDisk stops the VM of the sandbox in dir and writes its
	// root disk as a checked raw ext4 image (journal replayed) to dst;
	// base is the pristine image the VM's disk started from.
	ExportRootDisk(ctx context.Context, dir, dst string) (base string, err error)
	// UnprivilegedCommand returns a command that runs name as the
	// runtime's unprivileged user, with no capabilities, no supplementary
	// groups and no_new_privs.
	UnprivilegedCommand(ctx context.Context, name string, arg ...string) *exec.Cmd
}

// DiskSource is the LayerSource of a VM runtime: the sandbox's writes
// live in its virtual disk, not in a host directory. After a step the VM
// is stopped and its disk exported to a raw image (see DiskExporter).
//
// The guest controlled every byte of that image, so the host kernel never
// mounts it. A child process - this executable again (DiffDisksChild),
// run as the runtime's unprivileged user with no capabilities, in its own
// empty network namespace, with an empty environment, resource limits and
// only the two images and a pipe as descriptors - reads both the pristine base image and the exported one
// with the user-space reader internal/ext4, and writes the difference
// (diffImages) as a tar stream. The daemon unpacks that stream into an
// upper directory with extractUpper, which checks every entry again. Both
// images are the same ext4 file system before and after the step, so
// untouched files keep inode and ctime: unlike a comparison with the
// host's layer tree this does not depend on mkfs.ext4 -d keeping times
// exactly (it drops the nanoseconds).
type DiskSource struct {
	vm  DiskExporter
	log *slog.Logger
	exe string // the executable run as the reader (this one)
}

// NewDiskSource returns the LayerSource for the VM runtime vm.
func NewDiskSource(vm DiskExporter, log *slog.Logger) *DiskSource {
	if log == nil {
		log = slog.Default()
	}
	return &DiskSource{vm: vm, log: log}
}

// Upper implements LayerSource.
func (s *DiskSource) Upper(ctx context.Context, sandboxDir, _ string) (upper string, _ func(), err error) {
	t0 := time.Now()
	work, err := os.MkdirTemp(sandboxDir, "layer-")
	if err != nil {
		return "", nil, fmt.Errorf("creating layer work dir: %w", err)
	}
	release := func() {
		if err := os.RemoveAll(work); err != nil {
			s.log.Warn("removing layer work dir", "dir", work, "err", err)
		}
	}
	defer func() {
		if err != nil {
			release()
		}
	}()
	disk := filepath.Join(work, "disk.raw")
	base, err := s.vm.ExportRootDisk(ctx, sandboxDir, disk)
	if err != nil {
		return "", nil, err
	}
	exported := time.Since(t0)
	upper = filepath.Join(work, "upper")
	if err := s.diffDisks(ctx, base, disk, upper); err != nil {
		return "", nil, err
	}
	s.log.Debug("read a build step's layer from the VM disk", "dir", sandboxDir,
		"export", exported.Round(time.Millisecond), "total", time.Since(t0).Round(time.Millisecond))
	return upper, release, nil
}

// diffDisksArg, as the first argument, makes this executable the
// unprivileged image reader (DiffDisksChild).
const diffDisksArg = "airlock-internal-diff-disks"

// Exit codes of the reader.
const (
	diffExitFailed = 1 // an internal error, message on stderr
	diffExitUser   = 3 // the guest's image or changes were refused, message on stderr
)

// diffDisks runs the reader on the images base and disk and unpacks its
// stream into upper (which must not exist).
func (s *DiskSource) diffDisks(ctx context.Context, base, disk, upper string) error {
	exePath := s.exe
	if exePath == "" {
		p, err := os.Executable()
		if err != nil {
			return fmt.Errorf("locating this executable for the disk reader: %w", err)
		}
		exePath = p
	}
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, p := range []string{base, disk, exePath} {
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("opening %s: %w", p, err)
		}
		files = append(files, f)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// fds 3 (base), 4 (disk), 5 (the executable, run through /proc so
	// that the unprivileged user needs no access to its path).
	cmd := s.vm.UnprivilegedCommand(ctx, "/proc/self/fd/5", diffDisksArg)
	cmd.ExtraFiles = files
	cmd.Env = []string{}
	cmd.Dir = "/"
	// Its own (empty) network, IPC and UTS namespaces: no loopback
	// services of the host to talk to. (No Pdeathsig: it follows the
	// forking thread, which the Go runtime may end; the child ends on a
	// broken pipe or the context.)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
	}
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the disk reader: %w", err)
	}
	xerr := extractUpper(ctx, out, upper)
	if xerr == nil {
		// The tar's end; the reader writes nothing after it.
		if n, _ := io.CopyN(io.Discard, out, 64<<10); n == 64<<10 {
			xerr = errors.New("reading the VM disk: data after the end of the layer stream")
		}
	}
	if xerr != nil {
		cancel() // the reader may be blocked writing
	}
	werr := cmd.Wait()
	msg := strings.TrimSpace(stderr.String())
	var ee *exec.ExitError
	switch {
	case werr != nil && errors.As(werr, &ee) && ee.ExitCode() == diffExitUser:
		return userErr("%s", msg)
	case werr != nil && xerr == nil:
		return fmt.Errorf("reading the VM disk: %w: %s", werr, msg)
	case xerr != nil:
		return xerr
	}
	return nil
}

// limitedBuffer keeps the first 4 KiB written to it.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if rest := 4096 - b.Len(); rest > 0 {
		b.Buffer.Write(p[:min(len(p), rest)])
	}
	return len(p), nil
}

// DiffDisksChild runs the unprivileged disk reader and exits if this
// process was started as one (by DiskSource); otherwise it returns. The
// daemon's main calls it first thing.
func DiffDisksChild() {
	if len(os.Args) != 2 || os.Args[1] != diffDisksArg {
		return
	}
	os.Exit(diffDisksMain())
}

// Limits of the reader process: it reads two images and writes a pipe.
const (
	readerMemory  = 1 << 30 // Go heap soft limit
	readerAddress = 4 << 30 // RLIMIT_AS
)

func diffDisksMain() (code int) {
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(os.Stderr, "the disk reader failed: %v\n", p)
			code = diffExitFailed
		}
	}()
	// Nothing to write but the pipe, nothing to open, bounded memory.
	for _, l := range []struct {
		res int
		max uint64
	}{{unix.RLIMIT_FSIZE, 0}, {unix.RLIMIT_CORE, 0}, {unix.RLIMIT_NOFILE, 16}, {unix.RLIMIT_AS, readerAddress}} {
		if err := unix.Setrlimit(l.res, &unix.Rlimit{Cur: l.max, Max: l.max}); err != nil {
			fmt.Fprintf(os.Stderr, "the disk reader: setrlimit: %v\n", err)
			return diffExitFailed
		}
	}
	debug.SetMemoryLimit(readerMemory)
	if os.Geteuid() == 0 {
		fmt.Fprintln(os.Stderr, "the disk reader refuses to run as root")
		return diffExitFailed
	}
	open := func(fd uintptr, name string) (*ext4.FS, error) {
		f := os.NewFile(fd, name)
		fi, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		fs, err := ext4.Open(f, fi.Size())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return fs, nil
	}
	old, err := open(3, "the base image")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return diffExitFailed
	}
	cur, err := open(4, "the step's disk")
	if err != nil {
		return reportErr(err)
	}
	bw := bufio.NewWriterSize(os.Stdout, 1<<20)
	tw := tar.NewWriter(bw)
	if err := diffImages(old, cur, tw); err != nil {
		return reportErr(err)
	}
	if err := tw.Close(); err != nil {
		return reportErr(err)
	}
	if err := bw.Flush(); err != nil {
		return reportErr(err)
	}
	return 0
}

// reportErr prints err for the daemon and returns the exit code: the
// guest's image or its changes being refused is the user's error.
func reportErr(err error) int {
	if errors.Is(err, ext4.ErrCorrupt) {
		fmt.Fprintf(os.Stderr, "the step left a root file system that cannot be read: %v\n", err)
		return diffExitUser
	}
	if ue, ok := sandbox.AsUserError(err); ok {
		fmt.Fprintln(os.Stderr, ue.Msg)
		return diffExitUser
	}
	fmt.Fprintln(os.Stderr, err)
	return diffExitFailed
}

var _ LayerSource = (*DiskSource)(nil)
