//go:build linux

package microvm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/helperenv"
)

// jailScript is run by sh as PID 1 of a fresh pid, mount, IPC and UTS
// namespace (see jailCommand). It builds the VMM's whole filesystem
// view on a tmpfs - /usr read-only (the VMM's binary, libraries and
// firmware), the loader cache, the device nodes the VMM needs and a /proc
// of the new pid namespace - then pivots into the jail, detaches the host's
// tree and drops to the unprivileged user with no capabilities and
// no_new_privs before exec'ing the VMM. Images, kernel and initrd arrive as
// inherited descriptors only.
//
// The device nodes are made here (mknod, as root, before the drop) with the
// host device's numbers, and the ones the VMM opens (/dev/kvm,
// /dev/net/tun) are owned by the VMM's uid, mode 0600, as Firecracker's
// jailer does: the host's own modes of those devices (0600 root:root on
// some hosts, 0660 root:kvm on stock distributions) never matter, and the
// jail holds no other device.
//
// Arguments: $1 jail dir, $2 uid, $3 gid, $4 the cgroup.procs files to
// join (space-separated, may be empty), $5 the devices to create
// (space-separated "name,major,minor,mode,uid:gid"), $6 a command run as
// root before the jail is built (the probe's TAP; empty for VMs), then the
// VMM's argv.
const jailScript = `set -e
jail=$1 uid=$2 gid=$3 cgroups=$4 devices=$5 pre=$6
shift 6
for f in $cgroups; do echo 0 > "$f"; done
[ -z "$pre" ] || eval "$pre"
mount --make-rprivate /
mount -t tmpfs -o mode=755,size=1m,nosuid airlock-jail "$jail"
mkdir -p "$jail/usr" "$jail/dev/net" "$jail/proc" "$jail/etc" "$jail/tmp"
mount --rbind /usr "$jail/usr"
mount -o remount,bind,ro "$jail/usr"
ln -s usr/lib "$jail/lib"
ln -s usr/lib64 "$jail/lib64"
ln -s usr/bin "$jail/bin"
ln -s usr/sbin "$jail/sbin"
: > "$jail/etc/ld.so.cache"
mount --bind /etc/ld.so.cache "$jail/etc/ld.so.cache"
for e in $devices; do
	name=${e%%,*}; e=${e#*,}
	major=${e%%,*}; e=${e#*,}
	minor=${e%%,*}; e=${e#*,}
	mode=${e%%,*}; owner=${e#*,}
	mknod -m "$mode" "$jail/dev/$name" c "$major" "$minor"
	chown "$owner" "$jail/dev/$name"
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

// jailDevice is a character device made inside the jail.
type jailDevice struct {
	Name         string // below /dev
	Major, Minor uint32
	Mode         uint32 // permission bits
	UID, GID     int
}

func (d jailDevice) arg() string {
	return fmt.Sprintf("%s,%d,%d,%o,%d:%d", d.Name, d.Major, d.Minor, d.Mode, d.UID, d.GID)
}

// jailDevices returns the device nodes a VMM under accel needs, with the
// host's device numbers: /dev/null, /dev/zero and /dev/urandom (0666,
// root's), /dev/net/tun when tap (the VMM attaches its TAP) and /dev/kvm
// for "kvm", both owned by uid:gid with mode 0600. A device the host lacks
// is an error naming it.
func jailDevices(accel string, tap bool, uid, gid int) ([]jailDevice, error) {
	type want struct {
		name  string
		owned bool
	}
	wants := []want{{"null", false}, {"zero", false}, {"urandom", false}}
	if tap {
		wants = append(wants, want{"net/tun", true})
	}
	if accel == "kvm" {
		wants = append(wants, want{"kvm", true})
	}
	var devs []jailDevice
	for _, w := range wants {
		var st unix.Stat_t
		if err := unix.Stat("/dev/"+w.name, &st); err != nil {
			return nil, fmt.Errorf("the VMM needs /dev/%s: %w", w.name, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR {
			return nil, fmt.Errorf("the VMM needs /dev/%s, which is not a character device", w.name)
		}
		d := jailDevice{Name: w.name, Major: unix.Major(uint64(st.Rdev)), Minor: unix.Minor(uint64(st.Rdev)), Mode: 0o666}
		if w.owned {
			d.Mode, d.UID, d.GID = 0o600, uid, gid
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// jail is how one jailed process is started.
type jail struct {
	Dir      string // mount point of the jail's tmpfs (an empty directory)
	UID, GID int
	Cgroups  []string // cgroup.procs files to join
	Devices  []jailDevice
	// NetNS is the network namespace to run in (entered with nsenter);
	// "" with NewNet: a fresh, empty one.
	NetNS  string
	NewNet bool
	Pre    string // shell command run as root in the namespaces before the jail is built
}

// jailCommand returns the command that runs argv in j (see jailScript).
// nsenter and sh are the host's binaries.
func jailCommand(nsenter, sh string, j jail, argv []string) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, errors.New("jail: no command")
	}
	var devs []string
	for _, d := range j.Devices {
		devs = append(devs, d.arg())
	}
	script := append([]string{sh, "-c", jailScript, "airlock-jail", j.Dir, strconv.Itoa(j.UID), strconv.Itoa(j.GID),
		strings.Join(j.Cgroups, " "), strings.Join(devs, " "), j.Pre}, argv...)
	flags := uintptr(syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS)
	var cmd *exec.Cmd
	switch {
	case j.NetNS != "":
		cmd = exec.Command(nsenter, append([]string{"--net=" + j.NetNS, "--"}, script...)...)
	case j.NewNet:
		flags |= syscall.CLONE_NEWNET
		cmd = exec.Command(script[0], script[1:]...)
	default:
		return nil, errors.New("jail: no network namespace")
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	cmd.Stdin = devnull
	// Never the daemon's environment (its credentials): the jail script and
	// the VMM get PATH and the C locale only.
	cmd.Env = helperenv.Env()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own session: the VM must outlive the daemon.
		Setsid:     true,
		Cloneflags: flags,
	}
	return cmd, nil
}
