//go:build linux

package microvm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/helperenv"
)

// baseImage returns the read-only ext4 image of the template directory
// rootfs, building it once (mkfs.ext4 -d) under imagesDir. Template
// directories are immutable and named by their content hash, so the
// directory's path is the cache key.
func (r *Runtime) baseImage(ctx context.Context, rootfs string) (string, error) {
	sum := sha256.Sum256([]byte(rootfs))
	key := hex.EncodeToString(sum[:])[:24]
	img := filepath.Join(r.imagesDir, key+".ext4")
	if _, err := os.Stat(img); err == nil {
		return img, nil
	}
	if err := os.MkdirAll(r.imagesDir, 0o755); err != nil {
		return "", fmt.Errorf("creating image cache: %w", err)
	}
	lock, err := os.OpenFile(img+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", fmt.Errorf("locking image: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", fmt.Errorf("locking image: %w", err)
	}
	defer os.Remove(lock.Name())
	if _, err := os.Stat(img); err == nil {
		return img, nil
	}
	t0 := time.Now()
	bytesUsed, inodes, err := treeSize(rootfs)
	if err != nil {
		return "", fmt.Errorf("measuring template %s: %w", rootfs, err)
	}
	// Room for ext4's metadata and journal; the guest grows the file
	// system to its overlay's size at boot.
	sizeMB := bytesUsed*12/10/(1<<20) + 128
	tmp := img + ".tmp"
	_ = os.Remove(tmp)
	cmd := helperenv.Command(ctx, r.mkfs, "-q", "-F", "-t", "ext4", "-L", "airlock-root",
		"-N", strconv.FormatInt(inodes*3/2+8192, 10),
		"-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard",
		"-d", rootfs, tmp, strconv.FormatInt(sizeMB, 10)+"M")
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("mkfs.ext4 -d %s: %w: %s", rootfs, err, bytes.TrimSpace(out))
	}
	if err := os.Chmod(tmp, 0o444); err != nil {
		return "", fmt.Errorf("chmod image: %w", err)
	}
	if err := os.Rename(tmp, img); err != nil {
		return "", fmt.Errorf("installing image: %w", err)
	}
	r.log.Info("built root image", "template", rootfs, "image", img, "sizeMB", sizeMB, "took", time.Since(t0).Round(time.Millisecond))
	return img, nil
}

// treeSize sums the allocation of the files under dir (4 KiB blocks) and
// counts its inodes.
func treeSize(dir string) (size, inodes int64, err error) {
	err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		inodes++
		size += 4096
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			size += (fi.Size() + 4095) &^ 4095
		}
		return nil
	})
	return size, inodes, err
}

// createOverlay creates the sandbox's copy-on-write disk: a qcow2 over the
// raw base image, diskMB larger than the base (the guest grows its file
// system into it at boot).
func (r *Runtime) createOverlay(ctx context.Context, base, overlay string, diskMB int) error {
	fi, err := os.Stat(base)
	if err != nil {
		return fmt.Errorf("base image: %w", err)
	}
	size := fi.Size() + int64(diskMB)<<20
	cmd := helperenv.Command(ctx, r.qemuImg, "create", "-q", "-f", "qcow2", "-o", "lazy_refcounts=on",
		"-b", base, "-F", "raw", overlay, strconv.FormatInt(size, 10))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img create %s: %w: %s", overlay, err, bytes.TrimSpace(out))
	}
	return nil
}

// ConfigMagic starts the guest configuration disk.
const ConfigMagic = "AIRLOCK-VM-CONFIG\n"

// GuestConfig is what the agent, as the VM's init, applies before it
// switches to the root disk (read from the config disk, see
// internal/envd/vminit).
type GuestConfig struct {
	Hostname    string   `json:"hostname"`
	Hosts       []string `json:"hosts,omitempty"`
	Nameservers []string `json:"nameservers,omitempty"`
	Env         []string `json:"env,omitempty"`
	// TimeUnixNano is the host's clock when the VM was started.
	TimeUnixNano int64 `json:"timeUnixNano"`
	// Mounts are the volumes to mount over NFS (volumes.go).
	Mounts []GuestMount `json:"mounts,omitempty"`
}

// writeConfigDisk writes cfg as a small raw disk: ConfigMagic, the JSON,
// zero padding to a whole number of 4 KiB blocks.
func writeConfigDisk(path string, cfg GuestConfig) error {
	b, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encoding guest config: %w", err)
	}
	data := append([]byte(ConfigMagic), b...)
	data = append(data, make([]byte, 4096-len(data)%4096)...)
	if err := os.WriteFile(path, data, 0o400); err != nil {
		return fmt.Errorf("writing config disk: %w", err)
	}
	return nil
}
