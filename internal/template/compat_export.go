package template

import "context"

// CompatLibPath is where the gVisor compat preload library lives inside a
// root filesystem (listed in /etc/ld.so.preload).
const CompatLibPath = compatLibPath

// CompatHash identifies the compat library's source (for cache keys).
func CompatHash() string { return compatHash() }

// BuildCompatLib compiles the compat preload library into dir and returns
// its path. Only glibc root filesystems may preload it.
func BuildCompatLib(ctx context.Context, dir string) (string, error) {
	return buildCompatLib(ctx, dir)
}
