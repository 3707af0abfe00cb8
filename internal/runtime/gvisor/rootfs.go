//go:build linux

package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/loopdev"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/helperenv"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// Layout of a sandbox directory (spec.Dir):
//
//	config.json   OCI bundle spec (the directory is the bundle)
//	agent.log     stdout/stderr of runsc and of the agent
//	disk.img      sparse ext4 image holding the writable layer (when disk-limited)
//	layer/        writable layer: the ext4 mount point (or a plain dir)
//	layer/upper   overlay upper dir: everything the sandbox writes
//	layer/work    overlay work dir
//	layer.base    bytes used by an empty ext4 layer (baseline for DiskUsed)
//	rootfs/       overlay mount: template (lower) + layer/upper
const (
	bundleRootfs = "rootfs"
	layerDir     = "layer"
	diskImage    = "disk.img"
	layerBase    = "layer.base"
	agentLog     = "agent.log"
)

// UpperDir is the overlay upper directory (the sandbox's writes) of the
// sandbox whose state directory is dir.
func UpperDir(dir string) string { return filepath.Join(dir, layerDir, "upper") }

// RootfsDir is the merged root filesystem of the sandbox whose state
// directory is dir, as seen from the host while the sandbox exists.
func RootfsDir(dir string) string { return filepath.Join(dir, bundleRootfs) }

// AgentLogPath is the file receiving runsc's and the agent's output.
func AgentLogPath(dir string) string { return filepath.Join(dir, agentLog) }

// prepareLayer creates the writable layer in dir: a freshly formatted sparse
// ext4 image of diskMB megabytes mounted on layer/ when diskMB > 0, a plain
// directory otherwise.
func (r *Runtime) prepareLayer(ctx context.Context, dir string, diskMB int) error {
	layer := filepath.Join(dir, layerDir)
	if err := os.Mkdir(layer, 0o700); err != nil {
		return fmt.Errorf("creating layer dir: %w", err)
	}
	if diskMB > 0 {
		img := filepath.Join(dir, diskImage)
		if err := r.makeImage(ctx, img, int64(diskMB)<<20); err != nil {
			return err
		}
		if err := mountImage(img, layer); err != nil {
			return err
		}
	}
	for _, d := range []string{"upper", "work"} {
		if err := os.Mkdir(filepath.Join(layer, d), 0o755); err != nil {
			return fmt.Errorf("creating overlay %s dir: %w", d, err)
		}
	}
	if diskMB > 0 {
		var st unix.Statfs_t
		if err := unix.Statfs(layer, &st); err != nil {
			return fmt.Errorf("statfs layer: %w", err)
		}
		used := (st.Blocks - st.Bfree) * uint64(st.Bsize)
		if err := os.WriteFile(filepath.Join(dir, layerBase), []byte(strconv.FormatUint(used, 10)), 0o600); err != nil {
			return fmt.Errorf("writing layer baseline: %w", err)
		}
	}
	return nil
}

// makeImage creates a sparse file of size bytes and formats it as ext4
// without a journal (the layer is thrown away after a host crash anyway).
func (r *Runtime) makeImage(ctx context.Context, img string, size int64) error {
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("creating disk image: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sizing disk image: %w", err)
	}
	cmd := helperenv.Command(ctx, r.mkfsPath, "-q", "-F", "-O", "^has_journal", "-m", "0",
		"-E", "lazy_itable_init=1,nodiscard", img)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// mountImage attaches img to a free loop device (auto-cleared when the
// filesystem is unmounted) and mounts it on target.
func mountImage(img, target string) error {
	if err := loopdev.Mount(img, target, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME); err != nil {
		return fmt.Errorf("mounting disk image: %w", err)
	}
	return nil
}

// mountOverlay mounts the overlay root filesystem of a sandbox.
func mountOverlay(lower, dir string) error {
	upper := UpperDir(dir)
	work := filepath.Join(dir, layerDir, "work")
	merged := RootfsDir(dir)
	for _, p := range []string{lower, upper, work} {
		if strings.ContainsAny(p, ",:\\") {
			return fmt.Errorf("path %q cannot be used in overlay options", p)
		}
	}
	if err := os.Mkdir(merged, 0o755); err != nil {
		return fmt.Errorf("creating rootfs mount point: %w", err)
	}
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	if err := unix.Mount("overlay", merged, "overlay", 0, data); err != nil {
		return fmt.Errorf("mounting overlay rootfs: %w", err)
	}
	return nil
}

// writeGuestFiles writes the per-sandbox files into the merged root
// filesystem: hostname, hosts, resolv.conf and the agent's bind-mount
// target. All access goes through an os.Root so that symlinks in the
// template cannot redirect writes outside the sandbox root.
func writeGuestFiles(rootfs string, spec runtime.Spec, hostname string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return fmt.Errorf("opening rootfs: %w", err)
	}
	defer root.Close()

	var hosts strings.Builder
	hosts.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	fmt.Fprintf(&hosts, "127.0.1.1\t%s\n", hostname)
	for _, h := range spec.Hosts {
		hosts.WriteString(strings.TrimSpace(h))
		hosts.WriteByte('\n')
	}
	var resolv strings.Builder
	for _, ns := range spec.Nameservers {
		fmt.Fprintf(&resolv, "nameserver %s\n", ns)
	}
	files := []struct {
		path string
		data string
		mode os.FileMode
	}{
		{"etc/hostname", hostname + "\n", 0o644},
		{"etc/hosts", hosts.String(), 0o644},
		{"etc/resolv.conf", resolv.String(), 0o644},
		{strings.TrimPrefix(runtime.AgentGuestPath, "/"), "", 0o755},
	}
	// /tmp is bind-mounted onto itself (see buildSpec), so it must exist.
	if _, err := root.Lstat("tmp"); errors.Is(err, os.ErrNotExist) {
		if err := root.Mkdir("tmp", 0o777); err != nil {
			return fmt.Errorf("creating /tmp: %w", err)
		}
		if err := root.Chmod("tmp", os.ModeSticky|0o777); err != nil {
			return fmt.Errorf("chmod /tmp: %w", err)
		}
	}
	for _, f := range files {
		if err := root.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			return fmt.Errorf("creating /%s: %w", filepath.Dir(f.path), err)
		}
		// Replace rather than write through: the template may ship these
		// as symlinks.
		if err := root.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("replacing /%s: %w", f.path, err)
		}
		if err := root.WriteFile(f.path, []byte(f.data), f.mode); err != nil {
			return fmt.Errorf("writing /%s: %w", f.path, err)
		}
	}
	return nil
}

// AgentLog implements runtime.AgentLogger: the agent's stderr.
func (r *Runtime) AgentLog(dir string) string { return AgentLogPath(dir) }
