package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// DirBacking keeps each volume as a plain directory,
// <root>/<id>/data, with its size limit in <root>/<id>/size. Nothing below
// the content API enforces the limit (accounting.go: per-volume accounts,
// walked again now and then): a sandbox that mounts such a volume can
// write past it (up to the free space of root's filesystem). It is the
// Backing for a cluster whose nodes share root on a network filesystem
// (NFS, CephFS, EFS; `--volume-root`), where every node sees every volume
// at once.
type DirBacking struct {
	root string
	// RewalkAfter is how old a volume's account may get before the next
	// upload or Usage walks the volume again (0: DefaultRewalkAfter).
	RewalkAfter time.Duration

	accts accounts
	clock func() time.Time // nil: time.Now (tests)
	walks atomic.Int64     // volumes walked (tests)
}

var (
	_ Backing  = (*DirBacking)(nil)
	_ Uploader = (*DirBacking)(nil)
)

// NewDirBacking returns the Backing keeping volumes under root (created if
// missing).
func NewDirBacking(root string) (*DirBacking, error) {
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, fmt.Errorf("volume root %s: %w", root, err)
	}
	return &DirBacking{root: root}, nil
}

// validID matches the ids the API gives volumes (uuids): no separator, no
// dot, so an id can never name anything outside root.
var validID = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z_-]{0,63}$`)

func (b *DirBacking) volumeDir(id string) (string, error) {
	if !validID.MatchString(id) {
		return "", fmt.Errorf("volume id %q: %w", id, ErrNotFound)
	}
	return filepath.Join(b.root, id), nil
}

// Create makes volume id's directory, owned by the sandboxes' user and
// mode 0777 (as the loop backing's).
func (b *DirBacking) Create(_ context.Context, id string, sizeBytes int64) error {
	dir, err := b.volumeDir(id)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o711); err != nil {
		return fmt.Errorf("creating volume %s: %w", id, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "size"), []byte(strconv.FormatInt(sizeBytes, 10)+"\n"), 0o644); err != nil {
		return errors.Join(fmt.Errorf("creating volume %s: %w", id, err), os.RemoveAll(dir))
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o777); err != nil {
		return errors.Join(fmt.Errorf("creating volume %s: %w", id, err), os.RemoveAll(dir))
	}
	if err := os.Chown(data, DefaultUID, DefaultGID); err != nil {
		return errors.Join(fmt.Errorf("creating volume %s: %w", id, err), os.RemoveAll(dir))
	}
	// Mkdir's mode went through the umask.
	if err := os.Chmod(data, 0o777); err != nil {
		return errors.Join(fmt.Errorf("creating volume %s: %w", id, err), os.RemoveAll(dir))
	}
	a := b.accts.get(id)
	a.mu.Lock()
	a.used, a.size, a.walked = 0, sizeBytes, b.now()
	a.mu.Unlock()
	return nil
}

// Dir returns volume id's data directory, or ErrNotFound.
func (b *DirBacking) Dir(_ context.Context, id string) (string, error) {
	dir, err := b.volumeDir(id)
	if err != nil {
		return "", err
	}
	data := filepath.Join(dir, "data")
	if _, err := os.Stat(data); errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("volume %s: %w", id, ErrNotFound)
	} else if err != nil {
		return "", fmt.Errorf("volume %s: %w", id, err)
	}
	return data, nil
}

// Usage reports volume id's account (accounting.go): the space its files
// took at the last walk, what uploads wrote since and hold now, and its
// size limit. It walks the volume when the account is older than
// RewalkAfter.
func (b *DirBacking) Usage(ctx context.Context, id string) (used, size int64, err error) {
	if _, err := b.Dir(ctx, id); err != nil {
		if errors.Is(err, ErrNotFound) { // deleted, maybe by another node
			b.accts.drop(id)
		}
		return 0, 0, err
	}
	a, err := b.fresh(ctx, id)
	if err != nil {
		return 0, 0, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.used + a.reserved, a.size, nil
}

// measure sums the space volume id's files take (allocated blocks, each
// hard-linked file once) by walking it, and reads its size limit.
func (b *DirBacking) measure(ctx context.Context, id string) (used, size int64, err error) {
	b.walks.Add(1)
	data, err := b.Dir(ctx, id)
	if err != nil {
		return 0, 0, err
	}
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(data), "size"))
	if err != nil {
		return 0, 0, fmt.Errorf("volume %s: reading its size: %w", id, err)
	}
	if size, err = strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("volume %s: reading its size: %w", id, err)
	}
	used, err = DiskUsage(ctx, data)
	if err != nil {
		return 0, 0, fmt.Errorf("volume %s: %w", id, err)
	}
	return used, size, nil
}

// DiskUsage is the space the files under dir take on disk (allocated
// blocks; a file with several links counted once). It does not follow
// symbolic links and does not leave dir's filesystem.
func DiskUsage(ctx context.Context, dir string) (int64, error) {
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // removed while walking
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		} else if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			total += info.Size()
			return nil
		}
		if st.Nlink > 1 && !info.IsDir() {
			k := inode{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		total += st.Blocks * 512
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("measuring %s: %w", dir, err)
	}
	return total, nil
}

// Delete removes volume id: first renamed out of the way (its Dir is gone
// at once), then removed. A volume without storage is no error.
func (b *DirBacking) Delete(_ context.Context, id string) error {
	dir, err := b.volumeDir(id)
	if err != nil {
		return nil
	}
	b.accts.drop(id)
	trash := filepath.Join(b.root, ".deleting-"+id)
	if err := os.Rename(dir, trash); errors.Is(err, fs.ErrNotExist) {
		return os.RemoveAll(trash) // an earlier Delete that did not finish
	} else if err != nil {
		return fmt.Errorf("deleting volume %s: %w", id, err)
	}
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("deleting volume %s: %w", id, err)
	}
	return nil
}
