// Package agentbin keeps the airlock-envd binaries that sandboxes run,
// content-addressed under <data>/agents/<sha256>/airlock-envd.
//
// A sandbox maps its agent's code from the host file for as long as it
// lives, and a checkpoint (pause, fork, snapshot, boot snapshot) refers to
// that file again when it is restored. Replacing the file in place — a new
// airlock build — would leave restored sandboxes running another binary's
// code at the old addresses (gVisor restores and then the agent faults).
// So each build's agent gets its own immutable path, recorded with every
// sandbox and snapshot, and old ones are removed only when nothing refers
// to them (GC).
package agentbin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// FileName is the agent's file name inside its content directory.
const FileName = "airlock-envd"

// InDir is where the agent build at path (recorded by any node, whose
// agents directory may differ: a build's directory name is its content
// hash) is in the agents directory dir. path is untrusted (it comes from a
// database row or a stored image another node wrote): it must end in
// <64 lowercase hex digits>/airlock-envd, else ok is false.
func InDir(dir, path string) (p string, ok bool) {
	sum, name := filepath.Base(filepath.Dir(path)), filepath.Base(path)
	if name != FileName || !isHex64(sum) {
		return "", false
	}
	return filepath.Join(dir, sum, FileName), true
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Install copies src into dir/<sha256 of src>/airlock-envd unless it is
// already there, and returns that path. The copy is written to a temporary
// file, synced and renamed, so a crash leaves either nothing or a whole
// binary.
func Install(dir, src string) (string, error) {
	sum, size, err := hashFile(src)
	if err != nil {
		return "", fmt.Errorf("reading agent binary: %w", err)
	}
	cdir := filepath.Join(dir, sum)
	dst := filepath.Join(cdir, FileName)
	if fi, err := os.Stat(dst); err == nil && fi.Mode().IsRegular() && fi.Size() == size {
		return dst, nil
	}
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		return "", fmt.Errorf("creating agent dir: %w", err)
	}
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("opening agent binary: %w", err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(cdir, ".tmp-*")
	if err != nil {
		return "", fmt.Errorf("creating agent copy: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), in); err != nil {
		tmp.Close()
		return "", fmt.Errorf("copying agent binary: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		tmp.Close()
		return "", fmt.Errorf("agent binary %s changed while it was copied", src)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", fmt.Errorf("agent copy: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", fmt.Errorf("agent copy: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("agent copy: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("installing agent copy: %w", err)
	}
	return dst, nil
}

// GC removes the agent directories under dir whose binary is not in keep
// (paths as Install returned them) and returns how many it removed.
// Leftover temporary files of an interrupted Install go too.
func GC(dir string, keep []string) (int, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("listing agents: %w", err)
	}
	kept := map[string]bool{}
	for _, p := range keep {
		kept[filepath.Clean(p)] = true
	}
	removed := 0
	var errs []error
	for _, de := range ents {
		if !de.IsDir() || !isSum(de.Name()) {
			continue
		}
		if kept[filepath.Join(dir, de.Name(), FileName)] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, de.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

// isSum reports whether name is a lower-case hex sha256.
func isSum(name string) bool {
	return len(name) == sha256.Size*2 && strings.Trim(name, "0123456789abcdef") == ""
}

func hashFile(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	if !fi.Mode().IsRegular() {
		return "", 0, fmt.Errorf("%s is not a regular file", p)
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
