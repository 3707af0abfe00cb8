//go:build linux

package microvm

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// VMInitMarker is the file whose presence in the initramfs tells the agent
// that it is PID 1 of an Airlock microVM (internal/envd/vminit).
const VMInitMarker = "airlock-vm"

// cpioEntry is one member of a newc cpio archive.
type cpioEntry struct {
	name         string
	mode         uint32 // type bits | permissions
	data         io.Reader
	size         int64
	major, minor uint32 // device numbers of a device node
}

const (
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFCHR = 0o020000
)

// writeCPIO writes entries as an uncompressed newc ("070701") archive, the
// format the kernel unpacks into its initial root filesystem.
func writeCPIO(w io.Writer, entries []cpioEntry) error {
	bw := bufio.NewWriter(w)
	var off int64
	pad := func() error {
		if n := (4 - off%4) % 4; n > 0 {
			if _, err := bw.Write(make([]byte, n)); err != nil {
				return err
			}
			off += n
		}
		return nil
	}
	write := func(e cpioEntry, ino int) error {
		name := e.name + "\x00"
		hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
			ino, e.mode, 0, 0, 1, 0, e.size, 0, 0, e.major, e.minor, len(name), 0)
		n, err := io.WriteString(bw, hdr+name)
		if err != nil {
			return err
		}
		off += int64(n)
		if err := pad(); err != nil {
			return err
		}
		if e.data != nil {
			c, err := io.CopyN(bw, e.data, e.size)
			off += c
			if err != nil {
				return fmt.Errorf("copying %s: %w", e.name, err)
			}
			if err := pad(); err != nil {
				return err
			}
		}
		return nil
	}
	for i, e := range entries {
		if err := write(e, i+1); err != nil {
			return err
		}
	}
	if err := write(cpioEntry{name: "TRAILER!!!"}, 0); err != nil {
		return err
	}
	return bw.Flush()
}

// agentInitrd returns the path of an initramfs whose /init is the agent at
// agentPath, building it once per agent content (so a rebuilt agent needs
// no rebuilt root image, and an unchanged one is not copied per sandbox).
func agentInitrd(cacheDir, agentPath string) (string, error) {
	if err := CheckAgent(agentPath); err != nil {
		return "", err
	}
	f, err := os.Open(agentPath)
	if err != nil {
		return "", fmt.Errorf("opening agent: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return "", fmt.Errorf("hashing agent: %w", err)
	}
	out := filepath.Join(cacheDir, "initrd-"+hex.EncodeToString(h.Sum(nil))[:16]+".cpio")
	if fi, err := os.Stat(out); err == nil && fi.Size() > size {
		return out, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", fmt.Errorf("rewinding agent: %w", err)
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("creating initrd cache: %w", err)
	}
	tmp, err := os.CreateTemp(cacheDir, ".initrd-*")
	if err != nil {
		return "", fmt.Errorf("creating initrd: %w", err)
	}
	defer os.Remove(tmp.Name())
	entries := []cpioEntry{
		{name: "dev", mode: sIFDIR | 0o755},
		{name: "dev/console", mode: sIFCHR | 0o600, major: 5, minor: 1},
		{name: "proc", mode: sIFDIR | 0o555},
		{name: "newroot", mode: sIFDIR | 0o755},
		{name: VMInitMarker, mode: sIFREG | 0o444},
		{name: "init", mode: sIFREG | 0o755, data: f, size: size},
	}
	if err := writeCPIO(tmp, entries); err != nil {
		tmp.Close()
		return "", fmt.Errorf("writing initrd: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return "", fmt.Errorf("chmod initrd: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("writing initrd: %w", err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", fmt.Errorf("installing initrd: %w", err)
	}
	return out, nil
}
