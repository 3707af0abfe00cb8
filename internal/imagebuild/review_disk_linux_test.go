//go:build linux

package imagebuild

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// The test binary is also the unprivileged disk reader DiskSource starts.
func init() { DiffDisksChild() }

// fakeVM is a DiskExporter whose "VM disk" is a prepared image; the reader
// runs jailed exactly as with the microVM runtime (setpriv to nobody).
type fakeVM struct {
	base, disk string
	record     string // if set, the reader's uid, capabilities and net namespace are written here
}

func (v fakeVM) ExportRootDisk(_ context.Context, _, dst string) (string, error) {
	in, err := os.Open(v.disk)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return "", err
	}
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		return "", err
	}
	return v.base, nil
}

func (v fakeVM) UnprivilegedCommand(ctx context.Context, name string, arg ...string) *exec.Cmd {
	argv := []string{"--reuid=65534", "--regid=65534", "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"}
	if v.record != "" {
		argv = append(argv, "sh", "-c", `{ id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; readlink /proc/self/ns/net; } > '`+
			v.record+`'; exec "$0" "$@"`)
	}
	return exec.CommandContext(ctx, "setpriv", append(append(argv, name), arg...)...)
}

// watchMounts polls, until stop is called, for a mount and for a loop
// device that involve one of paths (the sandbox dir, the images); it
// returns what it saw.
func watchMounts(paths ...string) (stop func() []string) {
	var mu sync.Mutex
	var seen []string
	var done atomic.Bool
	var wg sync.WaitGroup
	involves := func(s string) bool {
		for _, p := range paths {
			if strings.Contains(s, p) {
				return true
			}
		}
		return false
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !done.Load() {
			if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
				for _, l := range strings.Split(string(b), "\n") {
					if involves(l) {
						mu.Lock()
						seen = append(seen, "mount: "+l)
						mu.Unlock()
					}
				}
			}
			files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
			for _, f := range files {
				if b, err := os.ReadFile(f); err == nil && involves(string(b)) {
					mu.Lock()
					seen = append(seen, "loop device: "+f+" -> "+strings.TrimSpace(string(b)))
					mu.Unlock()
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return func() []string {
		done.Store(true)
		wg.Wait()
		return seen
	}
}

// debugfsW runs debugfs -w with the requests on img.
func debugfsW(t *testing.T, img string, reqs ...string) {
	t.Helper()
	// debugfs takes one -R; run them one by one.
	for _, r := range reqs {
		if out, err := exec.Command("debugfs", "-w", "-R", r, img).CombinedOutput(); err != nil {
			t.Fatalf("debugfs -w -R %q: %v: %s", r, err, out)
		}
	}
}

// TestReviewDisk is the security review's M6 (issue 23): a microVM build
// step's disk, every byte of which the guest controlled, was loop-mounted
// by the host kernel. DiskSource now reads it in user space, in an
// unprivileged child; crafted images give an error (never a panic) and
// nothing is mounted.
func TestReviewDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the reader is started through setpriv as nobody")
	}
	for _, tool := range []string{"mkfs.ext4", "debugfs", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (e2fsprogs, util-linux)", tool)
		}
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "src")
	write(t, filepath.Join(src, "etc/motd"), "hello", 0o644)
	write(t, filepath.Join(src, "usr/bin/tool"), strings.Repeat("x", 100000), 0o755)
	write(t, filepath.Join(src, "opt/a/b/c"), "c", 0o644)
	base := filepath.Join(dir, "base.ext4")
	mkImage(t, src, base)
	newFile := filepath.Join(dir, "new-file")
	write(t, newFile, "written by the step", 0o644)

	// step makes the "VM disk": the base image changed by debugfs
	// requests (the guest's writes), then corrupted by craft.
	step := func(t *testing.T, reqs []string, craft func(t *testing.T, img string)) string {
		img := filepath.Join(t.TempDir(), "disk.ext4")
		cp(t, base, img)
		debugfsW(t, img, reqs...)
		if craft != nil {
			craft(t, img)
		}
		return img
	}
	// upper runs DiskSource.Upper on disk, watching for mounts.
	upper := func(t *testing.T, disk string) (string, error) {
		sbDir := t.TempDir()
		src := NewDiskSource(fakeVM{base: base, disk: disk}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		stop := watchMounts(sbDir, base, disk)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		up, release, err := src.Upper(ctx, sbDir, "")
		if seen := stop(); len(seen) > 0 {
			t.Errorf("the host mounted the step's disk:\n%s", strings.Join(seen, "\n"))
		}
		if err == nil {
			t.Cleanup(release)
		}
		if err != nil && (strings.Contains(err.Error(), "panic") || strings.Contains(err.Error(), "reader failed")) {
			t.Errorf("the reader crashed instead of refusing: %v", err)
		}
		return up, err
	}
	wantRefused := func(t *testing.T, err error, what string) {
		t.Helper()
		if err == nil {
			t.Fatalf("a crafted image (%s) was read without an error", what)
		}
		if _, ok := sandbox.AsUserError(err); !ok {
			t.Errorf("%s: err = %v, want a user error", what, err)
		}
		t.Logf("refused: %v", err)
	}

	t.Run("ok-a-normal-step", func(t *testing.T) {
		disk := step(t, []string{"write " + newFile + " /etc/hostname", "rm /etc/motd"}, nil)
		up, err := upper(t, disk)
		if err != nil {
			t.Fatalf("Upper: %v", err)
		}
		if _, err := os.Lstat(filepath.Join(up, "etc/hostname")); err != nil {
			t.Errorf("the new file is not in the layer: %v", err)
		}
		if fi, err := os.Lstat(filepath.Join(up, "etc/motd")); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			t.Errorf("the deleted file has no whiteout: %v %v", fi, err)
		}
		if _, err := os.Lstat(filepath.Join(up, "usr")); err == nil {
			t.Error("an unchanged directory is in the layer")
		}
	})
	t.Run("jail-unprivileged-own-netns", func(t *testing.T) {
		recDir, err := os.MkdirTemp("", "airlock-m6-") // reachable by nobody, unlike t.TempDir
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(recDir) })
		if err := os.Chmod(recDir, 0o777); err != nil {
			t.Fatal(err)
		}
		rec := filepath.Join(recDir, "rec")
		disk := step(t, []string{"write " + newFile + " /etc/hostname"}, nil)
		src := NewDiskSource(fakeVM{base: base, disk: disk, record: rec}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		_, release, err := src.Upper(context.Background(), t.TempDir(), "")
		if err != nil {
			t.Fatalf("Upper: %v", err)
		}
		release()
		b, err := os.ReadFile(rec)
		if err != nil {
			t.Fatal(err)
		}
		own, err := os.Readlink("/proc/self/ns/net")
		if err != nil {
			t.Fatal(err)
		}
		got := string(b)
		for _, want := range []string{"65534\n", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1"} {
			if !strings.Contains(got, want) {
				t.Errorf("the reader ran with %q, want %q in it", got, want)
			}
		}
		if !strings.Contains(got, "net:[") || strings.Contains(got, own) {
			t.Errorf("the reader's network namespace %q: want its own, not the host's %s", got, own)
		}
	})
	t.Run("attack/M6-truncated-image", func(t *testing.T) {
		disk := step(t, nil, func(t *testing.T, img string) {
			if err := os.Truncate(img, 1<<20); err != nil {
				t.Fatal(err)
			}
		})
		_, err := upper(t, disk)
		wantRefused(t, err, "truncated")
	})
	t.Run("attack/M6-bad-superblock", func(t *testing.T) {
		disk := step(t, nil, func(t *testing.T, img string) { patch(t, img, 1024+0x38, []byte{0, 0}) })
		_, err := upper(t, disk)
		wantRefused(t, err, "no superblock magic")
	})
	t.Run("attack/M6-feature-flag", func(t *testing.T) {
		// An incompat feature a kernel would act on (inline_data, encrypt).
		disk := step(t, nil, func(t *testing.T, img string) {
			var b [4]byte
			readAt(t, img, 1024+0x60, b[:])
			binary.LittleEndian.PutUint32(b[:], binary.LittleEndian.Uint32(b[:])|0x8000|0x10000)
			patch(t, img, 1024+0x60, b[:])
		})
		_, err := upper(t, disk)
		wantRefused(t, err, "unsupported feature flags")
		if err != nil && !strings.Contains(err.Error(), "inline_data") {
			t.Errorf("the refusal does not name the feature: %v", err)
		}
	})
	t.Run("attack/M6-extent-past-end", func(t *testing.T) {
		disk := step(t, []string{"write " + newFile + " /etc/hostname"}, func(t *testing.T, img string) {
			// i_block words 3-5 are the first extent; 5 is its start.
			debugfsW(t, img, "sif /usr/bin/tool block[5] 0x7ffffff0", "sif /etc/hostname block[5] 0x7ffffff0")
		})
		_, err := upper(t, disk)
		wantRefused(t, err, "extent past the end")
	})
	t.Run("attack/M6-directory-loop", func(t *testing.T) {
		disk := step(t, []string{"mkdir /opt/loop"}, func(t *testing.T, img string) {
			debugfsW(t, img, "ln / /opt/loop/root")
		})
		_, err := upper(t, disk)
		wantRefused(t, err, "a directory loop")
	})
	t.Run("attack/M6-entry-names-bad-inode", func(t *testing.T) {
		disk := step(t, []string{"write " + newFile + " /etc/hostname"}, func(t *testing.T, img string) {
			debugfsW(t, img, "sif /etc/hostname mode 0170000")
		})
		_, err := upper(t, disk)
		wantRefused(t, err, "unknown file type")
	})
	t.Run("attack/M6-byte-flips", func(t *testing.T) {
		// Deterministic corruption of the metadata: the superblock, the
		// group descriptors, the inode table and directory blocks. Each
		// image is read to the end or refused; none crashes the reader or
		// is mounted.
		fi, err := os.Stat(base)
		if err != nil {
			t.Fatal(err)
		}
		var offs []int64
		for o := int64(1024); o < 1024+256; o += 29 {
			offs = append(offs, o)
		}
		for o := int64(2048); o < 4096*3; o += 499 {
			offs = append(offs, o)
		}
		// The first inode table (mkfs puts it early; the root inode is
		// number 2) and a spread over the rest.
		for o := int64(1024 + 3); o < fi.Size() && len(offs) < 60; o += fi.Size() / 20 {
			offs = append(offs, o)
		}
		refused := 0
		for i, o := range offs {
			disk := step(t, nil, func(t *testing.T, img string) {
				var b [1]byte
				readAt(t, img, o, b[:])
				b[0] ^= 0xA5
				patch(t, img, o, b[:])
			})
			if _, err := upper(t, disk); err != nil {
				refused++
			}
			if t.Failed() {
				t.Fatalf("flip %d at %d", i, o)
			}
		}
		t.Logf("%d images with a flipped byte: %d refused, the rest read", len(offs), refused)
	})
}

func patch(t *testing.T, img string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(img, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func readAt(t *testing.T, img string, off int64, b []byte) {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
}
