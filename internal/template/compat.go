package template

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// compatSource is a tiny preload library installed into every template; see
// compat/statx_compat.c for why it exists.
//
//go:embed compat/statx_compat.c
var compatSource []byte

// compatLibPath is where the library lands inside templates.
const compatLibPath = "/usr/lib/airlock/libairlock-compat.so"

// compatHash identifies the library's source; it is part of every recipe hash.
func compatHash() string {
	s := sha256.Sum256(compatSource)
	return hex.EncodeToString(s[:8])
}

// buildCompatLib compiles the preload library with the host's C compiler
// (templates and host are both Debian 12, so the glibc ABI matches).
func buildCompatLib(ctx context.Context, dir string) (string, error) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		if cc, err = exec.LookPath("gcc"); err != nil {
			return "", fmt.Errorf("a C compiler is needed to build templates (apt-get install gcc libc6-dev): %w", err)
		}
	}
	src := filepath.Join(dir, "statx_compat.c")
	if err := os.WriteFile(src, compatSource, 0o644); err != nil {
		return "", fmt.Errorf("writing compat source: %w", err)
	}
	out := filepath.Join(dir, "libairlock-compat.so")
	cmd := exec.CommandContext(ctx, cc, "-shared", "-fPIC", "-O2", "-Wall", "-o", out, src)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("compiling compat library: %w: %s", err, b)
	}
	return out, nil
}
