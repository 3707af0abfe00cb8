//go:build linux

package volume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/internal/loopdev"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/helperenv"
	"github.com/airlock-sandbox/airlock/internal/mountinfo"
)

// Loop keeps each volume in its own sparse ext4 image, loop-mounted on the
// host: the image's size is the volume's limit, so a full volume gives its
// writer ENOSPC and never fills the node, and hard links cannot leave it
// (a separate filesystem). Layout under Root:
//
//	<id>/disk.img   the sparse ext4 image (journaled)
//	<id>/mnt/       its mount point
//	<id>/mnt/data/  Dir: the volume's files; owned by the sandbox's
//	                default user (uid/gid 1000), mode 0777 (E2B's default
//	                directory mode) so every user can write there
//
// Mounts survive a daemon restart (they live in the host's mount
// namespace); OpenLoop mounts any image that is not mounted (after a host
// reboot).
type Loop struct {
	Root string
	// Mkfs is the mkfs.ext4 binary ("" = found on PATH).
	Mkfs string
	// DefaultSize is the size of a volume whose Create names none (0:
	// MinSize).
	DefaultSize int64
	log         *slog.Logger
	mu          sync.Mutex // serialises Create/Delete/mount of one Loop
}

// DefaultOwner is the uid and gid of the volume's root directory: the
// default user ("user", 1000) of Airlock's templates, as in E2B.
const DefaultOwner = 1000

// MinSize is the smallest volume a Loop makes (an ext4 journal and its
// metadata need a few MiB).
const MinSize = 16 << 20

const (
	loopImage = "disk.img"
	loopMnt   = "mnt"
	loopData  = "data"
)

var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// CheckID refuses ids that cannot name a directory under a Backing's root.
func CheckID(id string) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("invalid volume id %q", id)
	}
	return nil
}

// OpenLoop returns the Loop backing rooted at root, creating root and
// mounting the images of existing volumes that are not mounted. It fails
// with a clear error when the host has no loop devices or no mkfs.ext4.
func OpenLoop(ctx context.Context, root, mkfs string, log *slog.Logger) (*Loop, error) {
	if log == nil {
		log = slog.Default()
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return nil, fmt.Errorf("loop volumes need /dev/loop-control (modprobe loop, or give the daemon's container /dev/loop*), or use the dir backing: %w", err)
	}
	if mkfs == "" {
		mkfs = findMkfs()
		if mkfs == "" {
			return nil, errors.New("loop volumes need mkfs.ext4 (Debian: e2fsprogs), or use the dir backing")
		}
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("creating volume root: %w", err)
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	l := &Loop{Root: root, Mkfs: mkfs, log: log}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("reading volume root: %w", err)
	}
	for _, e := range ents {
		if !e.IsDir() || CheckID(e.Name()) != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, e.Name(), loopImage)); err != nil {
			continue
		}
		if err := l.ensureMounted(e.Name()); err != nil {
			log.Error("mounting volume", "volume", e.Name(), "err", err)
		}
	}
	return l, nil
}

func (l *Loop) dir(id string) string { return filepath.Join(l.Root, id) }

// Create implements Backing: a sparse image of sizeBytes (DefaultSize
// when 0; at least MinSize), formatted and mounted.
func (l *Loop) Create(ctx context.Context, id string, sizeBytes int64) (err error) {
	if err := CheckID(id); err != nil {
		return err
	}
	if sizeBytes <= 0 {
		sizeBytes = l.DefaultSize
	}
	sizeBytes = max(sizeBytes, MinSize)
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.dir(id)
	if err := os.Mkdir(d, 0o700); err != nil {
		return fmt.Errorf("creating volume %s: %w", id, err)
	}
	defer func() {
		if err != nil {
			_ = l.remove(id)
		}
	}()
	img := filepath.Join(d, loopImage)
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("creating volume image: %w", err)
	}
	err = f.Truncate(sizeBytes)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sizing volume image: %w", err)
	}
	// -m 0: no blocks reserved for root (the gofer writes as host root;
	// the image's size is the limit either way).
	cmd := helperenv.Command(ctx, l.Mkfs, "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", img)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if err := l.ensureMounted(id); err != nil {
		return err
	}
	data := filepath.Join(d, loopMnt, loopData)
	if err := os.Mkdir(data, 0o777); err != nil {
		return fmt.Errorf("creating volume data dir: %w", err)
	}
	if err := os.Chown(data, DefaultOwner, DefaultOwner); err != nil {
		return fmt.Errorf("chown volume data dir: %w", err)
	}
	if err := os.Chmod(data, 0o777); err != nil { // past the umask
		return fmt.Errorf("chmod volume data dir: %w", err)
	}
	return nil
}

// mounted reports whether mp is a mount point.
func mounted(mp string) (bool, error) {
	mps, err := mountinfo.Under(mp)
	if err != nil {
		return false, err
	}
	for _, m := range mps {
		if m == mp {
			return true, nil
		}
	}
	return false, nil
}

// ensureMounted mounts volume id's image unless it is mounted.
func (l *Loop) ensureMounted(id string) error {
	mp := filepath.Join(l.dir(id), loopMnt)
	if ok, err := mounted(mp); err != nil || ok {
		return err
	}
	if err := os.Mkdir(mp, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("creating volume mount point: %w", err)
	}
	return mountImage(filepath.Join(l.dir(id), loopImage), mp)
}

// Dir implements Backing.
func (l *Loop) Dir(ctx context.Context, id string) (string, error) {
	if err := CheckID(id); err != nil {
		return "", err
	}
	data := filepath.Join(l.dir(id), loopMnt, loopData)
	if _, err := os.Stat(filepath.Join(l.dir(id), loopImage)); errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("volume %s: %w", id, ErrNotFound)
	}
	l.mu.Lock()
	err := l.ensureMounted(id)
	l.mu.Unlock()
	if err != nil {
		return "", err
	}
	return data, nil
}

// Usage implements Backing: the filesystem's used blocks and its size, as
// statfs reports them (the size is the image's, less ext4's metadata).
func (l *Loop) Usage(ctx context.Context, id string) (used, size int64, err error) {
	data, err := l.Dir(ctx, id)
	if err != nil {
		return 0, 0, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(data, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs volume %s: %w", id, err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, int64(st.Blocks) * st.Bsize, nil
}

// Delete implements Backing. The volume's files are removed first, so a
// sandbox that still mounts it sees its mount empty (its gofer keeps the
// filesystem alive until it stops; writes there stay within the image's
// size and are dropped with it); then the image is unmounted (lazily when
// busy) and removed.
func (l *Loop) Delete(ctx context.Context, id string) error {
	if err := CheckID(id); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := os.Stat(l.dir(id)); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("volume %s: %w", id, ErrNotFound)
	}
	return l.remove(id)
}

func (l *Loop) remove(id string) error {
	d := l.dir(id)
	mp := filepath.Join(d, loopMnt)
	var errs []error
	if ok, err := mounted(mp); err != nil {
		errs = append(errs, err)
	} else if ok {
		data := filepath.Join(mp, loopData)
		if ents, err := os.ReadDir(data); err == nil {
			for _, e := range ents {
				if err := os.RemoveAll(filepath.Join(data, e.Name())); err != nil {
					errs = append(errs, fmt.Errorf("emptying volume %s: %w", id, err))
				}
			}
		}
		err := unix.Unmount(mp, unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(mp, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		}
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("unmounting volume %s: %w", id, err))...)
		}
	}
	if err := os.RemoveAll(d); err != nil {
		errs = append(errs, fmt.Errorf("removing volume %s: %w", id, err))
	}
	return errors.Join(errs...)
}

// mountFlags are the host mount's flags: nothing in a volume is setuid
// or a device on the host.
const mountFlags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOATIME

// attachedLoop returns the loop device already backed by img ("" if
// none): the image is still mounted somewhere else (a sandbox's gofer keeps
// its own mount after the host's was taken away). Mounting that device
// again shares its filesystem; attaching the file to a second device would
// mount one ext4 twice and corrupt it.
func attachedLoop(img string) string {
	if real, err := filepath.EvalSymlinks(img); err == nil {
		img = real
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.TrimSpace(string(b)) == img {
			return "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
		}
	}
	return ""
}

// mountImage attaches img to a free loop device (auto-cleared when the
// filesystem is unmounted) and mounts it on target (nosuid, nodev), or
// mounts the device img is already attached to.
func mountImage(img, target string) error {
	if dev := attachedLoop(img); dev != "" {
		if err := unix.Mount(dev, target, "ext4", mountFlags, ""); err != nil {
			return fmt.Errorf("mounting volume image (already on %s): %w", dev, err)
		}
		return nil
	}
	if err := loopdev.Mount(img, target, "ext4", mountFlags); err != nil {
		return fmt.Errorf("mounting volume image: %w", err)
	}
	return nil
}

// findMkfs finds mkfs.ext4 on PATH or in the sbin directories ("" if none).
func findMkfs() string {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p
	}
	for _, c := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if _, err := os.Stat(c); err == nil {
			return c
		}
	}
	return ""
}

var _ Backing = (*Loop)(nil)
