//go:build linux

package microvm

// jailScript is run by sh as PID 1 of a fresh pid, mount, IPC and UTS
// namespace (see Runtime.command). It builds the VMM's whole filesystem
// view on a tmpfs - /usr read-only (the VMM's binary, libraries and
// firmware), the loader cache, /dev/null, /dev/urandom, /dev/net/tun,
// /dev/kvm when present and a /proc of the new pid namespace - then
// pivots into the jail, detaches the host's tree and drops to the
// unprivileged user with no capabilities and no_new_privs before exec'ing
// the VMM. Images, kernel and initrd arrive as inherited descriptors only.
//
// Arguments: $1 jail dir, $2 uid, $3 gid, $4 the cgroup.procs files to
// join (space-separated, may be empty), then the VMM's argv.
const jailScript = `set -e
jail=$1 uid=$2 gid=$3 cgroups=$4
shift 4
for f in $cgroups; do echo 0 > "$f"; done
mount --make-rprivate /
mount -t tmpfs -o mode=755,size=1m airlock-jail "$jail"
mkdir -p "$jail/usr" "$jail/dev/net" "$jail/proc" "$jail/etc" "$jail/tmp"
mount --rbind /usr "$jail/usr"
mount -o remount,bind,ro "$jail/usr"
ln -s usr/lib "$jail/lib"
ln -s usr/lib64 "$jail/lib64"
ln -s usr/bin "$jail/bin"
ln -s usr/sbin "$jail/sbin"
: > "$jail/etc/ld.so.cache"
mount --bind /etc/ld.so.cache "$jail/etc/ld.so.cache"
for d in null zero urandom net/tun kvm; do
	[ -e "/dev/$d" ] || continue
	: > "$jail/dev/$d"
	mount --bind "/dev/$d" "$jail/dev/$d"
done
mount -t proc -o nosuid,nodev,noexec proc "$jail/proc"
cd "$jail"
mkdir .old
pivot_root . .old
umount -l /.old
rmdir /.old
exec setpriv --reuid="$uid" --regid="$gid" --clear-groups \
	--inh-caps=-all --bounding-set=-all --no-new-privs -- "$@"
`
