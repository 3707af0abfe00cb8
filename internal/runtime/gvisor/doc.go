// Package gvisor implements runtime.Runtime with gVisor: every sandbox is a
// runsc container (systrap platform, or ptrace where systrap cannot start;
// gVisor's own network stack) whose root filesystem is an overlay of a
// read-only template and a per-sandbox writable layer on a size-limited ext4
// image.
//
// Sandboxes are started in their own session and outlive the process that
// started them; a new Runtime over the same Root finds them again with List.
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # gVisor specifics (runsc from the gVisor module, pinned; systrap platform)
//
//   - **Which runsc.** `scripts/build-runsc.sh` (run by `setup.sh`) builds
//     `gvisor.dev/gvisor/runsc` at the pseudo-version in `internal/runtime/gvisor/runsc.version`
//     with `CGO_ENABLED=0 go install` into `/var/cache/airlock/runsc/<version>/runsc`, once per
//     machine (about 70 s on 2 cores). It must be static: a cgo build dies at sandbox start
//     ("fork/exec /proc/self/exe: no such file or directory", no dynamic loader in gVisor's chroot).
//     `airlock serve` and the root tests use that path (`gvisor.DefaultRunscPath`, same
//     version file through `go:embed`); `--runsc PATH` overrides it (the benchmark runs Debian's
//     2022 build that way). Debian's `runsc` package is not installed any more.
//
//   - **Platform.** `--runsc-platform auto` (default): at start the daemon runs
//     `runsc --platform=systrap do /bin/true` (no network, throw-away root, ~0.2 s); systrap when
//     it ran, else ptrace with the error as the reason. `GET /health` shows it:
//     `{"runtime":"gvisor","platform":"systrap","platformReason":"systrap probe ran in 219 ms",…}`.
//     `systrap` or `ptrace` skip the probe. KVM is not offered (it hangs on PVM hosts).
//
//   - **`--overlay2=none`.** Since 2023 runsc puts its own overlay over the root filesystem by
//     default (`root:self`: the upper layer is a file in the sandbox's memory accounting), so
//     writes would never reach the writable layer (disk.img) that disk limits, Dockerfile
//     builds and snapshots rely on. Airlock passes `--overlay2=none` on every call.
//
//   - **Gofer network namespace.** runsc runs every gofer in one shared empty network
//     namespace pinned by a bind mount at `<root>/null-netns`. The runtime unmounts it when the
//     daemon stops (`Runtime.Close`; running gofers keep the namespace), else the data dir
//     cannot be removed (EBUSY). The platform probe uses `--gofer-network-namespace=new`.
//
//   - **Network namespace check.** runsc refuses `--network=sandbox` in the root network namespace,
//     which it recognises by `dev_weight` (only the root namespace has it; `runsc/sandbox/network.go`,
//     `isRootNetNS`); the runtime also checks itself that the netns is not the host's.
//
//   - The OCI pids limit applies to runsc's own host tasks, so the guest limit is `RLIMIT_NPROC` and
//     the host cgroup gets a fork-bomb guard of 32 × the guest limit + 1024. Under ptrace that meant
//     ~9 host tasks per idle guest process (~27 per process of a fork bomb held at its limit); under
//     systrap 61 idle guest processes hold 145 host tasks (~2.4 each). The guard is kept at 32 ×: it
//     is only a ceiling (hitting it kills the sandbox), ptrace is still the fallback, and the fork-bomb
//     e2e (`abuse_test.go`, limits.test.mjs) holds with it.
//
//   - runsc has no OOM killer (gVisor issue 1967): a host cgroup at its limit kills a process of the
//     cgroup, which may be the sentry (the whole sandbox). The agent runs an OOM killer instead (`internal/envd/oomguard`, see Limits); the abuse test reads the bomb's
//     own exit status and accepts a kill inside or a stopped sandbox.
//
//   - **Stopping for a kill** (`stop.go`, `killgroup_linux.go`). `Stop` sends SIGKILL to every host
//     process of the sandbox and does not wait for the exit (`WaitStopped` does, in the background
//     teardown). On a hybrid cgroup host (v1 controllers at `/sys/fs/cgroup`, v2 without controllers
//     at `/sys/fs/cgroup/unified`: this project's hosts) `runsc run` and `runsc restore` start inside
//     a v2 cgroup of the sandbox's own, `unified/<cgroup parent>/<id>` (clone3 `CLONE_INTO_CGROUP`),
//     which every process runsc starts for it inherits, so `Stop` is one write to its `cgroup.kill`
//     instead of a pidfd, a `/proc/<pid>/cgroup` check and a signal for each of ~16 processes. The
//     group has no controllers (it limits nothing); `Destroy` removes it. On a pure v2 host runsc's own
//     cgroup has `cgroup.kill`; without either, `Stop` signals pid by pid as before.
//
//   - **Waking the agent** (`wake.go`). `Signal(SIGUSR1)` (listen again after a restore) and the
//     memory watcher's OOM guard wake-up (SIGUSR2) send a datagram to the agent's wake port, UDP
//     49982 on the sandbox's address (`Spec.GuestAddr`, remembered from `Start`/`Restore`/`Boot`, and
//     `KeepGuestAddr` for the running sandboxes a restarted daemon re-attaches;
//     `internal/guest.Wake`, re-sent every 25 ms until the agent echoes it), instead of `runsc kill`
//     (a Go process: ~10 ms of CPU, 1.4–1.7 s of wall time on a loaded host). gVisor saves the
//     agent's bound UDP socket with the sandbox, so a restored agent answers as soon as it runs.
//     `runsc kill` is the fallback: at once when the address is unknown or the sandbox answers "port unreachable" (an agent older
//     than the port, in an image paused by an older build); alongside the datagram when no echo came
//     in 2 s (the first to act ends the wait). Each fallback logs `waking the agent with runsc kill`
//     and counts in `airlock_agent_wakes_total{via="runsc"}` (answered datagrams: `via="datagram"`).
//     While a sandbox is being checkpointed its tasks are stopped and the guard is not woken.
//
//   - **Restore spec validation.** The pinned runsc refuses a restore whose OCI spec differs from the
//     checkpointed one in rlimits, mounts, capabilities, namespaces and the like
//     (`--restore-spec-validation=enforce`, `runsc/specutils/restore.go`), and an image whose
//     recorded runsc version differs ("runsc version does not match"; module builds all report
//     `VERSION_MISSING`, hence Airlock's own build identity, see boot snapshots). So `Clone`/`CloneSaved` copy the source bundle's rlimits and host pids guard into the child
//     (`inheritSpec`); `SaveLayer` keeps the source's `config.json` next to a snapshot's layer for
//     that. Unit `TestInheritSpec`; the fork/snapshot e2e cover it.
//
//   - `statx(2)` with `AT_NO_AUTOMOUNT` works (the pinned runsc ignores the flag,
//     `pkg/sentry/syscalls/linux/sys_stat.go`), so templates carry no preload library: `stat -c`
//     (commands.test.mjs) and `ls -l` (templates.test.mjs) run in sandboxes, and the OCI tests check
//     that no `/etc/ld.so.preload` is installed.
//
//   - runsc forces `PR_SET_NO_NEW_PRIVS` on every process ("noNewPrivileges ignored"), so the
//     setuid `sudo` cannot gain privileges. The runtime bind-mounts the agent binary over
//     `/usr/bin/sudo`; invoked as `sudo` it is a client of the agent's unix socket
//     (`/run/airlock-envd/sudo.sock`, `internal/envd/sudo`), which checks the caller with
//     `SO_PEERCRED` (root or a member of `sudo`/`admin`/`wheel`, like Debian's sudoers), runs the
//     command as the target user with the caller's stdin/stdout/stderr (SCM_RIGHTS), a reset
//     environment with `secure_path` and `SUDO_*` (or the caller's with `-E`), forwards signals
//     and returns the exit status. Supports `-u`, `-i`, `-s`, `-E`, `-n`, `-v`, `-l`, `--`.
//
//   - **File metadata.** `/files` metadata (`X-Metadata-*`) is `user.e2b.<key>` xattrs
//     (`internal/envd/filesystem/metastore.go`). runsc (directfs: the sentry calls `fsetxattr` on the
//     host file) stores them on the root filesystem, where they reach the overlay's upper dir on
//     disk.img, and on tmpfs; a microVM's ext4 has them too. On a filesystem without them (ramfs) an upload that
//     sets metadata is refused with 400 and the old content is kept (unit `TestMetadataOnRamfs`);
//     e2e `file metadata round trip` (files.test.mjs) runs on the sandbox's root filesystem.
package gvisor
