#!/usr/bin/env bash
# Builds the microVM guest kernel (vmlinux, PVH-bootable, no modules) from
# Debian's linux-source-6.1 with the checked-in config fragment:
#   make tinyconfig + merge_config.sh fragment + olddefconfig + make vmlinux.
# Cached by sha256(fragment + source package version) under
# $AIRLOCK_KERNEL_CACHE (default /var/cache/airlock/kernel)/<hash>/vmlinux, so it
# runs once per machine. Prints the path of the vmlinux on its last line.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '==> kernel: %s\n' "$*" >&2; }
die() { printf 'build-kernel: %s\n' "$*" >&2; exit 1; }

frag="internal/runtime/microvm/kernel/config.fragment"
src="${AIRLOCK_KERNEL_SOURCE:-/usr/src/linux-source-6.1.tar.xz}"
cache="${AIRLOCK_KERNEL_CACHE:-/var/cache/airlock/kernel}"

[ -f "$frag" ] || die "missing $frag"
[ -f "$src" ] || die "missing $src (apt-get install linux-source-6.1)"
ver=$(dpkg-query -W -f='${Version}' linux-source-6.1 2>/dev/null || stat -c %s "$src")
hash=$( { cat "$frag"; printf 'source=%s %s\n' "$(basename "$src")" "$ver"; } | sha256sum | cut -c1-16)
out="$cache/$hash"
if [ -s "$out/vmlinux" ]; then
	log "cached $out/vmlinux"
	echo "$out/vmlinux"
	exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -s "$out/vmlinux" ]; then
	echo "$out/vmlinux"
	exit 0
fi
work="$cache/build-$hash"
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
log "extracting $(basename "$src") (version $ver)"
tar -C "$work" --strip-components=1 -xf "$src"
jobs=$(nproc)
log "configuring: tinyconfig + $frag"
make -C "$work" -s tinyconfig >/dev/null
"$work/scripts/kconfig/merge_config.sh" -m -O "$work" "$work/.config" "$frag" >/dev/null
make -C "$work" -s olddefconfig >/dev/null
missing=0
while IFS= read -r line; do
	case "$line" in CONFIG_*=y) ;; *) continue ;; esac
	if ! grep -qx "$line" "$work/.config"; then
		log "warning: $line did not survive olddefconfig"
		missing=1
	fi
done <"$frag"
grep -q '^CONFIG_MODULES=y' "$work/.config" && die "modules enabled"
log "building vmlinux with -j$jobs (a few minutes; progress below)"
make -C "$work" -j"$jobs" vmlinux 2>&1 | awk '/^  (CC|AR|LD)/ { n++; if (n % 100 == 0) { printf "==> kernel: %d objects built\n", n > "/dev/stderr" } } /[Ee]rror/ { print > "/dev/stderr" }'
[ "${PIPESTATUS[0]}" -eq 0 ] || die "make vmlinux failed"
[ -s "$work/vmlinux" ] || die "no vmlinux produced"
mkdir -p "$out.tmp"
cp "$work/vmlinux" "$out.tmp/vmlinux"
cp "$work/.config" "$out.tmp/config"
make -C "$work" -s kernelrelease >"$out.tmp/release"
rm -rf "$out"
mv "$out.tmp" "$out"
log "built $out/vmlinux ($(cat "$out/release"), $(( $(date +%s) - start ))s, missing options: $missing)"
echo "$out/vmlinux"
