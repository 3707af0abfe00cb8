#!/usr/bin/env bash
# Sourced by the scripts that build a pinned Go program from its module
# (build-runsc.sh, build-s3-server.sh): go_install_pinned builds it static,
# once per version, under a cache directory, and prints the binary's path on
# its last line. Concurrent callers wait on a lock; a half-built binary is
# never left under the version's directory.
#
#   go_install_pinned NAME PACKAGE VERSION CACHE_DIR
#
# NAME is the binary's name (and the log prefix), PACKAGE the Go package
# path, VERSION the module version, CACHE_DIR the cache root (the binary ends
# up at CACHE_DIR/VERSION/NAME).
go_install_pinned() {
	local name=$1 pkg=$2 ver=$3 cache=$4
	local out="$cache/$ver" work start
	if [ -x "$out/$name" ]; then
		printf '==> %s: cached %s\n' "$name" "$out/$name" >&2
		echo "$out/$name"
		return 0
	fi
	command -v go >/dev/null 2>&1 || { printf '%s: go not found\n' "$name" >&2; return 1; }
	mkdir -p "$cache"
	exec 9>"$cache/.lock"
	flock 9
	if [ -x "$out/$name" ]; then
		echo "$out/$name"
		return 0
	fi
	work="$cache/build-$ver"
	rm -rf "$work"
	mkdir -p "$work"
	start=$(date +%s)
	printf '==> %s: building %s@%s (static)\n' "$name" "$pkg" "$ver" >&2
	# GOFLAGS from the caller (-mod=mod for this repository) do not apply to
	# a module-mode install of another module.
	if ! GOFLAGS= CGO_ENABLED=0 GOBIN="$work" go install -trimpath "$pkg@$ver"; then
		rm -rf "$work"
		printf '%s: go install %s@%s failed\n' "$name" "$pkg" "$ver" >&2
		return 1
	fi
	if [ ! -x "$work/$name" ] || ! go version -m "$work/$name" | grep -q 'CGO_ENABLED=0' || ! "$work/$name" --version >&2; then
		rm -rf "$work"
		printf '%s: the built binary is missing, not static, or does not run\n' "$name" >&2
		return 1
	fi
	mkdir -p "$out"
	mv "$work/$name" "$out/$name.tmp"
	mv "$out/$name.tmp" "$out/$name"
	rm -rf "$work"
	printf '==> %s: built %s in %d s\n' "$name" "$out/$name" $(($(date +%s) - start)) >&2
	echo "$out/$name"
}
