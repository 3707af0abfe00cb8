//go:build linux

package volume

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
)

// Buckets is the Backing of a node that serves bucket volumes: a bucket
// volume (Lookup gives its Bucket) is an s3fs mount on the host, made at
// the first Dir (a sandbox that mounts it, a content API request), kept
// while the daemon runs and across its restarts (like the sandboxes that
// bind it), and taken down by Delete; every other volume is Inner's.
//
// Under root (<data-dir>/buckets): mnt/<id> the mount points, keys/ (0700)
// the s3fs passwd files (0600, one per mount, removed at unmount), run/
// the s3fs pids, logs/ their logs. Sandboxes mount mnt/<id> only.
type Buckets struct {
	Inner Backing
	// Lookup returns volume id's bucket (with its credentials), nil for a
	// volume Inner keeps, ErrNotFound for none.
	Lookup func(ctx context.Context, id string) (*Bucket, error)
	// Dialer checks the endpoint's addresses again before each mount.
	Dialer *BucketDialer
	// S3FS is the s3fs binary ("s3fs": from PATH).
	S3FS string
	Log  *slog.Logger
	// MountTimeout bounds a mount and each health check (0: 20 s).
	MountTimeout time.Duration

	root  string
	locks sync.Map // volume id → *sync.Mutex: one mount or unmount of a volume at a time
}

func (b *Buckets) lock(id string) func() {
	m, _ := b.locks.LoadOrStore(id, new(sync.Mutex))
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

var _ Backing = (*Buckets)(nil)

// BucketSize is the size limit Usage reports for a bucket volume: none of
// Airlock's (the bucket's own quota, if any, applies).
const BucketSize = int64(1) << 62

// NewBuckets returns the Backing serving bucket volumes under root and
// every other volume from inner. It checks that s3fs is installed.
func NewBuckets(root string, inner Backing, lookup func(context.Context, string) (*Bucket, error), d *BucketDialer, log *slog.Logger) (*Buckets, error) {
	b := &Buckets{Inner: inner, Lookup: lookup, Dialer: d, S3FS: "s3fs", Log: log, root: root}
	if _, err := exec.LookPath(b.S3FS); err != nil {
		return nil, fmt.Errorf("bucket volumes need s3fs (Debian package s3fs): %w", err)
	}
	for _, dir := range []struct {
		p    string
		mode os.FileMode
	}{{root, 0o711}, {b.path("mnt"), 0o711}, {b.path("keys"), 0o700}, {b.path("run"), 0o700}, {b.path("logs"), 0o700}} {
		if err := os.MkdirAll(dir.p, dir.mode); err != nil {
			return nil, fmt.Errorf("bucket volumes: %w", err)
		}
		if err := os.Chmod(dir.p, dir.mode); err != nil {
			return nil, fmt.Errorf("bucket volumes: %w", err)
		}
	}
	// A passwd file left by a daemon that died mid-mount: no running
	// s3fs reads it after its start.
	if ents, err := os.ReadDir(b.path("keys")); err == nil {
		for _, e := range ents {
			_ = os.Remove(filepath.Join(b.path("keys"), e.Name()))
		}
	}
	return b, nil
}

func (b *Buckets) path(parts ...string) string {
	return filepath.Join(append([]string{b.root}, parts...)...)
}

func (b *Buckets) timeout() time.Duration {
	if b.MountTimeout > 0 {
		return b.MountTimeout
	}
	return 20 * time.Second
}

func (b *Buckets) lookup(ctx context.Context, id string) (*Bucket, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	return b.Lookup(ctx, id)
}

// Create makes a bucket volume's mount point (its marker on this node;
// the mount waits for the first Dir), or Inner's storage for another.
func (b *Buckets) Create(ctx context.Context, id string, sizeBytes int64) error {
	bk, err := b.lookup(ctx, id)
	if err != nil {
		return err
	}
	if bk == nil {
		return b.Inner.Create(ctx, id, sizeBytes)
	}
	if err := os.Mkdir(b.path("mnt", id), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating bucket volume %s: %w", id, err)
	}
	return nil
}

// Dir returns the s3fs mount of bucket volume id, mounting it if it is
// not (or if its s3fs died), or Inner's Dir.
func (b *Buckets) Dir(ctx context.Context, id string) (string, error) {
	bk, err := b.lookup(ctx, id)
	if err != nil {
		return "", err
	}
	if bk == nil {
		return b.Inner.Dir(ctx, id)
	}
	defer b.lock(id)()
	mp := b.path("mnt", id)
	switch st, err := b.health(mp); st {
	case mountOK:
		return mp, nil
	case mountDead:
		b.Log.Warn("bucket volume's s3fs is gone; mounting it again", "volume", id, "err", err)
		if err := b.unmountLocked(id); err != nil {
			return "", err
		}
	case mountStuck:
		return "", fmt.Errorf("bucket volume %s: its mount does not answer: %w", id, err)
	}
	if err := b.mountLocked(ctx, id, bk); err != nil {
		return "", err
	}
	return mp, nil
}

// Usage of a bucket volume is 0 of BucketSize (Airlock measures and
// limits nothing there); Inner's for another.
func (b *Buckets) Usage(ctx context.Context, id string) (used, size int64, err error) {
	bk, err := b.lookup(ctx, id)
	if err != nil {
		return 0, 0, err
	}
	if bk == nil {
		return b.Inner.Usage(ctx, id)
	}
	return 0, BucketSize, nil
}

// Delete of a bucket volume (called once its record is gone, so known
// here by its mount point) kills its s3fs, which every sandbox that
// mounts it then sees as "Transport endpoint is not connected", unmounts
// it and removes its files on this node: never the bucket's objects,
// which are the user's. Another volume is Inner's to delete.
func (b *Buckets) Delete(ctx context.Context, id string) error {
	if err := CheckID(id); err != nil {
		return nil
	}
	if _, err := os.Lstat(b.path("mnt", id)); errors.Is(err, fs.ErrNotExist) {
		return b.Inner.Delete(ctx, id)
	}
	defer b.lock(id)()
	if err := b.unmountLocked(id); err != nil {
		return err
	}
	if err := os.Remove(b.path("mnt", id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deleting bucket volume %s: %w", id, err)
	}
	_ = os.Remove(b.path("logs", id+".log"))
	return nil
}

// Sweep takes down the mounts of bucket volumes whose record is gone:
// deleted through another node of a cluster (whose Delete ran there), or
// while this daemon was down.
func (b *Buckets) Sweep(ctx context.Context) error {
	ents, err := os.ReadDir(b.path("mnt"))
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		id := e.Name()
		if CheckID(id) != nil {
			continue
		}
		if _, err := b.Lookup(ctx, id); !errors.Is(err, ErrNotFound) {
			continue // there, or the store did not answer: next time
		}
		unlock := b.lock(id)
		err := b.unmountLocked(id)
		if err == nil {
			err = os.Remove(b.path("mnt", id))
			_ = os.Remove(b.path("logs", id+".log"))
			b.Log.Info("bucket volume deleted elsewhere: its mount is gone", "volume", id)
		}
		unlock()
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RunSweeper runs Sweep every interval until ctx ends.
func (b *Buckets) RunSweeper(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := b.Sweep(ctx); err != nil {
				b.Log.Warn("sweeping bucket volume mounts", "err", err)
			}
		}
	}
}

// Close unmounts every bucket volume (a daemon that kills its sandboxes
// on exit: nothing binds them any more).
func (b *Buckets) Close() error {
	ents, err := os.ReadDir(b.path("mnt"))
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if CheckID(e.Name()) == nil {
			unlock := b.lock(e.Name())
			errs = append(errs, b.unmountLocked(e.Name()))
			unlock()
		}
	}
	return errors.Join(errs...)
}

type mountState int

const (
	mountNone  mountState = iota // not mounted
	mountOK                      // an s3fs mount that answers
	mountDead                    // mounted, its s3fs gone
	mountStuck                   // mounted, no answer within the timeout
)

// health checks mount point mp, bounded: a stat of a FUSE mount whose
// server hangs must not hold a request (or the volume's lock) for long. s3fs
// answers a stat of its root from memory, so a slow bucket is no
// mountStuck.
func (b *Buckets) health(mp string) (mountState, error) {
	fstype, err := mountType(mp)
	if err != nil {
		return mountStuck, err
	}
	if fstype == "" {
		return mountNone, nil
	}
	if fstype != "fuse.s3fs" {
		return mountStuck, fmt.Errorf("%s holds a %s mount, not s3fs", mp, fstype)
	}
	done := make(chan error, 1)
	go func() {
		var st unix.Stat_t
		done <- unix.Stat(mp, &st)
	}()
	select {
	case err := <-done:
		if err == nil {
			return mountOK, nil
		}
		if errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.ECONNABORTED) {
			return mountDead, err
		}
		return mountStuck, err
	case <-time.After(b.timeout()):
		return mountStuck, fmt.Errorf("stat %s: no answer in %v", mp, b.timeout())
	}
}

// mountType is the filesystem type mounted at mp ("" for none).
func mountType(mp string) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	typ := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional…] - fstype source super
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 || mountinfo.Unescape(fields[4]) != mp {
			continue
		}
		for i := 6; i < len(fields)-1; i++ {
			if fields[i] == "-" {
				typ = fields[i+1] // the last mount on mp is the visible one
				break
			}
		}
	}
	return typ, sc.Err()
}

// mountLocked runs s3fs for bucket volume id on its mount point and waits
// until it answers (s3fs checks the bucket before it serves) or fails.
func (b *Buckets) mountLocked(ctx context.Context, id string, bk *Bucket) error {
	u, err := url.Parse(bk.Endpoint)
	if err != nil {
		return fmt.Errorf("bucket volume %s: %w", id, err)
	}
	if b.Dialer != nil {
		if _, err := b.Dialer.Resolve(ctx, u.Hostname()); err != nil {
			return err
		}
	}
	mp := b.path("mnt", id)
	if err := os.MkdirAll(mp, 0o755); err != nil {
		return fmt.Errorf("bucket volume %s: %w", id, err)
	}
	// The mount point must be empty: anything written there while no
	// s3fs ran (it never is: Dir hands out live mounts only) is not the
	// bucket's.
	if ents, err := os.ReadDir(mp); err != nil || len(ents) > 0 {
		return fmt.Errorf("bucket volume %s: mount point %s is not an empty directory (%v)", id, mp, err)
	}
	// The credentials go to s3fs in a passwd file, never in argv or the
	// environment; it reads the file once, at start, and it is removed
	// once the mount answers (or fails).
	keyFile := b.path("keys", id)
	if err := os.WriteFile(keyFile, []byte(bk.Bucket+":"+bk.AccessKeyID+":"+bk.SecretAccessKey+"\n"), 0o600); err != nil {
		return fmt.Errorf("bucket volume %s: writing its passwd file: %w", id, err)
	}
	defer os.Remove(keyFile)
	src := bk.Bucket
	if bk.Prefix != "" {
		src += ":/" + strings.TrimSuffix(bk.Prefix, "/")
	}
	opts := []string{
		"passwd_file=" + keyFile,
		"url=" + bk.Endpoint,
		"endpoint=" + bk.Region,
		// The gofer (root, in its own user namespace setup) and the
		// content API read the mount: allow_other; files appear as the
		// sandboxes' user's, 0777 (objects carry no owner).
		"allow_other",
		"uid=" + strconv.Itoa(DefaultUID), "gid=" + strconv.Itoa(DefaultGID),
		"umask=0000", "mp_umask=0000",
		// Freshness over round trips: a stat is cached 1 s, so another
		// writer's change (a sandbox on another node, the bucket's own
		// clients) shows within a second or two.
		"stat_cache_expire=1",
		// A dead endpoint fails operations with EIO in tens of seconds
		// (s3fs sleeps 4 s before its one retry of a refused
		// connection), not minutes.
		"connect_timeout=5", "readwrite_timeout=20", "retries=1",
		"dbglevel=warn", "logfile=" + b.path("logs", id+".log"),
	}
	if bk.PathStyle {
		opts = append(opts, "use_path_request_style")
	}
	if bk.ReadOnly {
		opts = append(opts, "ro")
	}
	cmd := exec.Command(b.S3FS, src, mp, "-f", "-o", strings.Join(opts, ","))
	// Its own session, so it outlives this daemon like the sandboxes that
	// bind its mount; a bare environment (no proxy settings, nothing of
	// the daemon's).
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	logf, err := os.OpenFile(b.path("logs", id+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("bucket volume %s: %w", id, err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("bucket volume %s: starting s3fs: %w", id, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := os.WriteFile(b.path("run", id+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
		_ = cmd.Process.Kill()
		return fmt.Errorf("bucket volume %s: %w", id, err)
	}
	fail := func(err error) error {
		_ = cmd.Process.Kill()
		_ = b.unmountLocked(id)
		tail := logTail(b.path("logs", id+".log"))
		// The user's error: their bucket did not let itself be mounted.
		return &BucketError{Msg: fmt.Sprintf("mounting bucket %s at %s failed: %v%s", bk.Bucket, bk.Endpoint, err, tail)}
	}
	deadline := time.Now().Add(b.timeout())
	for {
		select {
		case err := <-exited:
			return fail(fmt.Errorf("s3fs exited: %v", err))
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		typ, err := mountType(mp)
		if err != nil {
			return fail(err)
		}
		if typ == "fuse.s3fs" {
			break
		}
		if time.Now().After(deadline) {
			return fail(errors.New("no mount in time"))
		}
	}
	// s3fs checks the bucket in its init, before it serves: a listing
	// answers once the check passed, and fails if it did not.
	done := make(chan error, 1)
	go func() {
		f, err := os.Open(mp)
		if err == nil {
			_, err = f.Readdirnames(1)
			if errors.Is(err, io.EOF) {
				err = nil
			}
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fail(err)
		}
	case err := <-exited:
		return fail(fmt.Errorf("s3fs exited: %v", err))
	case <-time.After(time.Until(deadline) + time.Second):
		return fail(errors.New("the mount did not answer in time"))
	}
	b.Log.Info("bucket volume mounted", "volume", id, "bucket", bk.Bucket, "prefix", bk.Prefix, "endpoint", bk.Endpoint, "readOnly", bk.ReadOnly, "pid", cmd.Process.Pid)
	return nil
}

// unmountLocked kills volume id's s3fs (its FUSE connection ends: every
// bind of the mount answers ENOTCONN at once) and detaches its mount.
func (b *Buckets) unmountLocked(id string) error {
	pidFile := b.path("run", id+".pid")
	if raw, err := os.ReadFile(pidFile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil && pid > 1 && isS3FS(pid, b.path("mnt", id)) {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
	_ = os.Remove(pidFile)
	_ = os.Remove(b.path("keys", id))
	mp := b.path("mnt", id)
	for range 8 { // stacked mounts, if any
		typ, err := mountType(mp)
		if err != nil {
			return err
		}
		if typ == "" {
			return nil
		}
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmounting bucket volume %s: %w", id, err)
		}
	}
	return fmt.Errorf("unmounting bucket volume %s: still mounted", id)
}

// isS3FS reports whether process pid is an s3fs serving mount point mp
// (a pid file may outlive its process, and the pid be reused).
func isS3FS(pid int, mp string) bool {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	args := strings.Split(string(raw), "\x00")
	return len(args) > 2 && filepath.Base(args[0]) == "s3fs" && slices.Contains(args, mp)
}

// logTail is the end of an s3fs log, for an error.
func logTail(path string) string {
	raw, err := os.ReadFile(path)
	if err != nil || len(raw) == 0 {
		return ""
	}
	if len(raw) > 600 {
		raw = raw[len(raw)-600:]
	}
	return " (s3fs: " + strings.TrimSpace(strings.ReplaceAll(string(raw), "\n", "; ")) + ")"
}
