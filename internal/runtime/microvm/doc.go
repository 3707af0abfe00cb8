// Package microvm implements runtime.Runtime with one small virtual machine
// per sandbox: its own Linux kernel (built by scripts/build-kernel.sh), the
// template as a shared read-only ext4 image under a per-sandbox qcow2
// overlay, and the agent (airlock-envd) as PID 1, started from an initramfs.
//
// The VMM (QEMU -M microvm) runs jailed: in its own pid, mount, IPC and UTS
// namespaces with a filesystem of only /usr, a few device nodes and /proc,
// inside the sandbox's network namespace, as an unprivileged user without
// capabilities, under QEMU's seccomp filter. All images reach it as
// inherited descriptors. The guest takes over the address internal/network
// gave the sandbox, through a TAP joined to the netns's eth0, so the daemon
// reaches the agent exactly as with gVisor.
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # microVM runtime (internal/runtime/microvm, internal/envd/vminit)
//
// `airlock serve --runtime auto|microvm|gvisor` (default `auto`). At start the daemon first checks
// what every microVM needs (`internal/daemon/runtime.go` `microvmProbe`): a **static agent** (`microvm.CheckAgent`:
// an ELF interpreter means `go build` with cgo on, whose agent could never run as a guest's PID 1:
// refused with the `CGO_ENABLED=0 go build …` line; `agentInitrd` refuses it too), QEMU, and a
// **guest kernel** (the newest in the cache, or `--microvm-kernel`; when none is cached and microVMs
// are wanted — `--runtime microvm`, or `auto` on a CPU with `vmx`/`svm` — the daemon runs
// `scripts/build-kernel.sh` next to its `bin/` once, progress on stderr). Then it boots a throw-away
// **probe** guest (`Probe`: kernel + agent initramfs, `airlock.probe` on the command line, the agent
// prints `AIRLOCK-PROBE-OK` and powers off) *exactly as a sandbox's VMM runs*: through the same jail
// (same device nodes, uid 65534, no capabilities, seccomp) with a TAP in a fresh network namespace,
// so any device-access or TAP problem fails the probe, not the first create. `microvm.Choose` then
// decides: `auto` → a microVM when the probe booted under KVM, else gVisor; `microvm` → KVM when the
// probe booted, else the same probe under TCG must boot (else the daemon refuses to start, saying
// why) and VMs run emulated; `gvisor` → no probe. The choice and its reason are in the log and in
// `GET /health` (`{"status":"ok","runtime":"microvm","runtimeReason":"KVM probe failed (…): microVMs
// run emulated (TCG)… (TCG probe booted in 1.2s)"}`). Any setup problem (dynamic agent, no QEMU, no
// kernel, a probe that does not boot) makes `auto` fall back to gVisor and say why there. The KVM
// probe needs the `vmx`/`svm` CPU flag: these hosts' `/dev/kvm` is PVM (a software hypervisor) on
// which stock guest kernels die in the instruction emulator (a jailed probe then only times out), so
// without the flag the KVM probe fails at once ("no vmx/svm CPU flag") and `auto` starts gVisor
// with no delay.
//
//   - **Guest kernel**: `scripts/build-kernel.sh` (run by `setup.sh` where the CPU has `vmx`/`svm`, by
//     `scripts/test.sh` always, and by the daemon when microVMs are chosen and none is cached) builds `vmlinux`
//     from Debian's `linux-source-6.1`: `make tinyconfig`, `merge_config.sh` with the checked-in
//     `internal/runtime/microvm/kernel/config.fragment` (virtio-mmio, blk, net, console, rng, ext4,
//     overlay, 8250, PVH, `IP_PNP`, IPv6, inotify, the NFSv3 client for volumes, the proc connector
//     for the activity feed's process entries, …; no modules, no PCI, no
//     ACPI), `olddefconfig`,
//     `make vmlinux`. Cached by sha256(fragment + source package version) at
//     `/var/cache/airlock/kernel/<hash>/{vmlinux,config,release}`; ~4 min once per machine (2 cores),
//     progress on stderr. The daemon uses the newest cached build unless `--microvm-kernel` says.
//
//   - **Root disk**: the template directory becomes an ext4 image once (`mkfs.ext4 -d`,
//     `<data>/microvm/images/<sha(template path)>.ext4`, read-only; templates are content-addressed
//     and immutable so the path is the key; `base`: 436 MB in 1.6 s). Each sandbox gets a qcow2
//     overlay (`qemu-img create -b base -F raw`) of base size + `DiskMB` in its dir; the agent grows
//     the mounted ext4 into it at boot (`EXT4_IOC_RESIZE_FS`). Deleted with the sandbox.
//
//   - **Agent as init**: the initramfs is built per agent binary (`initrd-<sha>.cpio`, newc written in
//     Go: `/init` = airlock-envd, `/dev/console`, the `airlock-vm` marker), so a rebuilt agent never
//     needs a rebuilt root image. `vminit.Boot` (only when PID 1 *and* the marker exists, so the gVisor
//     path is unchanged): mounts devtmpfs and proc, reads the config disk (a second virtio disk that
//     starts with `AIRLOCK-VM-CONFIG`: hostname, hosts, nameservers, env, host time), mounts the
//     root disk, writes `/etc/hostname|hosts|resolv.conf`, bind-mounts itself at
//     `/usr/local/bin/airlock-envd`, moves `/dev` and `/proc`, switches root (`MS_MOVE` + chroot),
//     mounts sysfs, devpts, `/dev/shm`, `/run`, sets hostname and (if >1 s off) the clock, brings `lo`
//     up, and re-execs the agent with the sandbox's environment (so `/proc/1/cmdline` and `environ`
//     look as under gVisor). `eth0` is configured by the kernel (`ip=` on the command line). When the
//     agent ends it syncs and reboots; `-no-reboot` turns that into QEMU exiting. `panic=-1` does the
//     same for a guest kernel panic: the sandbox is reported stopped, the daemon never waits on it.
//     `no_timer_check`: emulated on a busy host, the kernel's IO-APIC timer check at boot sometimes
//     missed its window and panicked ("IO-APIC + timer doesn't work!"). `random.trust_cpu=on`: the
//     RNG becomes ready from RDRAND while only the boot CPU runs, so its static key is patched
//     before other vCPUs and interrupts call into it. Patched later under TCG, its call site in
//     `crng_make_state` faulted once in a full run ("Fatal exception in interrupt", during a cold
//     boot's NFS mount).
//
//   - **Network**: internal/network is unchanged. In the sandbox's netns the runtime reads eth0's
//     address, MAC and gateway, creates `tap0` (owned by the VMM's uid), joins eth0 and tap0 with two
//     tc `mirred` redirects (ingress of one → egress of the other), and flushes eth0's address. The
//     guest's virtio-net uses eth0's MAC and address, so the host side (veth, nftables rules, egress
//     policy, proxy, agent client) sees exactly what it sees with gVisor. ~10 ms per HTTP request
//     under TCG. network.rules work unchanged for the same reason (Caps.EgressSteering; the host's
//     prerouting DNATs the guest's ruled connections to the egress proxy, the guest's agent installs
//     the CA from `/init` in the guest's own `/etc/ssl/certs/ca-certificates.crt`; e2e:
//     `test/e2e/microvm-secrets.test.mjs`).
//
//   - **Jail** (`jail.go`): the VMM is started by `nsenter --net=<netns>` with new pid, mount, IPC and UTS
//     namespaces; a shell as PID 1 of the new pid namespace joins the VMM's cgroups, builds a tmpfs
//     root (`nosuid`) with `/usr` (read-only), `/etc/ld.so.cache`, a `/proc` of its own pid namespace
//     and **its own device nodes**, `pivot_root`s into it and detaches the host tree, then `setpriv`
//     drops to uid/gid 65534 with no capabilities (bounding set empty) and `no_new_privs`, and execs
//     QEMU with `-sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny`.
//     **How the VMM gets each device** (as Firecracker's jailer does): the daemon reads the host
//     device's major/minor (`jailDevices`) and the jail shell, still root, `mknod`s it in the jail's
//     tmpfs: `/dev/null`, `/dev/zero`, `/dev/urandom` mode 0666 owned by root; `/dev/net/tun` (every
//     VM: its TAP) and `/dev/kvm` (only under `-accel kvm`) mode 0600 **owned by the VMM's uid**. The
//     host's own modes never matter (they differ between machines of one kind: `0600 root:root` on
//     some, `0666` on others, `0660 root:kvm` on stock Debian/Ubuntu with real KVM; DECISIONS). The TAP itself is created
//     in the sandbox's netns by root, owned by the same uid (`ip tuntap add … user 65534`), so the
//     unprivileged VMM may attach to it and to no other. The jail holds no other device node, and the
//     VMM, without CAP_MKNOD, cannot make one. QEMU gets no host paths at all: kernel, initrd, base
//     image, overlay and config disk are inherited descriptors (`/proc/self/fd/N`, `-add-fd` +
//     `/dev/fdset/N` in `-blockdev`, the qcow2's backing given as a node so its header path is never
//     opened). Cgroups (v1): memory = guest RAM + 384 MB VMM overhead, CPU quota = vCPUs,
//     256 tasks; an OOM kill there is reported as "it exceeded its memory limit".
//
//   - **A VMM that dies at start** fails the create at once: the manager waits for the agent through
//     `runtime.WaitReady`, which polls the runtime's `State` every 200 ms while the agent's `/health`
//     is polled; the moment the VMM (or a gVisor sandbox) reads stopped, the wait ends with a
//     `runtime.StoppedError` carrying `StopReason` and the tail of the console log (microVM) or agent
//     log (gVisor). The create answers 500 with that text (`sandbox … stopped 201ms after start, before
//     its agent answered: its virtual machine exited; log: qemu-system-x86_64: -device …: '…' is not a
//     valid device model name`), the log has it too, and only then is the sandbox dir removed. The
//     same wait covers resume, fork children and restored parents.
//
//   - **Lifecycle**: one JSON record per VM in `<data>/microvm/run/<id>.json` (pid, start time,
//     dir, netns); `State` = that pid alive with the same start time; `List` = the records, so a
//     restarted daemon re-attaches (QEMU runs in its own session). `Destroy` SIGKILLs the VMM, removes
//     the TAP, cgroups, dir and record. `Stats`: VMM CPU time and RSS from `/proc`, overlay blocks.
//     The daemon reaps its own children and keeps why they ended (`StopReason`: killed by signal,
//     guest kernel panic, memory limit).
//
//   - **Volumes** (`volumes.go`, `internal/volume/nfs`, `internal/envd/vminit/volumes_linux.go`): a VM
//     with `volumeMounts` gets its own NFSv3 server on the host side of its veth (the guest's gateway,
//     port `network.VolumeServerPort`, bound to the veth, socket mark `network.VolumeServerMark`),
//     exporting only its volumes as `/volume-<i>`. The mounts are in `vm.json` (`Volumes`) and the
//     config disk (`mounts`); the guest's init mounts each with mount(2) and text options
//     (`vers=3,proto=tcp,mountproto=tcp,nolock,hard,timeo=30,retrans=2,actimeo=0`, MOUNT and NFS on
//     one port, no rpcbind, no mount.nfs) from `network.VolumeServerAddr` (169.254.20.49:2049), the
//     same in every guest: the firewall redirects it to the host address of the veth the packet came
//     in on, so a fork child or a VM restored elsewhere reaches its own server with the address its
//     NFS client already holds. The server is started before the VMM runs (Start, Restore, Boot; a
//     fork child's at its Restore) and stopped when the VMM ends (Checkpoint, Shutdown, Destroy);
//     `New` starts them again for the VMs a previous daemon left running. File handles are the
//     kernel's, so the guest's handles stay valid across servers. Connections are reset when closed
//     (SO_LINGER 0 at accept), so after a resume or a daemon restart the guest's client reconnects at
//     once (with a FIN, the host's TIME_WAIT kept it out for about a minute). A fork child is
//     special: its restored connection has the parent's address as its source, which the guest drops
//     when it moves; TCP then can send nothing on it and never gives up. So, while the child's netns is
//     in its re-addressing state, it also holds the server address (`readdressPrepare`), and the
//     agent, before answering the re-addressing `/freeze`, forces the NFS transports to disconnect
//     (`vminit.ReconnectVolumes`: writing sysfs `dstaddr`); the netns resets them, and the client
//     reconnects from the child's own address at its next request. Files the guest creates belong to
//     uid/gid 1000 with the modes go-nfs gives (files 0666, directories 0777, as the content API's).
//     A full volume answers NFS3ERR_NOSPC: the writer gets ENOSPC.
//
//   - **Limits**: `-smp` = CPUs (default 1), `-m` = memory (default 512 MB, at least 128), overlay =
//     DiskMB (default 1 GiB). Processes and open files are the guest kernel's business.
//
//   - **Pause / resume** (`runtime.Checkpointer`, `checkpoint.go`, `qmp.go`): guest RAM is always a
//     `memory-backend-file` (`<dir>/memory`, `share=on`, owned by the VMM's uid, passed as a
//     descriptor) and QEMU has a QMP socket (the runtime listens at `<dir>/qmp.sock` and QEMU inherits
//     the listening descriptor). Checkpoint: `migrate-set-capabilities x-ignore-shared`, `stop`,
//     `getfd` (SCM_RIGHTS) of `<image>/vm.state`, `migrate fd:state`, `quit` → ~40 KB of device state,
//     26–35 ms; the RAM stays in the memory file. Restore: the same machine (`<dir>/vm.json`) with
//     `-incoming defer`, `migrate-incoming fd:state`, `cont`: running 0.09 s after start on an idle
//     host (0.4–0.9 s with the e2e suite running beside it), agent answering 0.2–1.3 s. eth0's address
//     (put back by `network.Readdress` for gVisor) is flushed again. The agent's `/freeze` is a no-op
//     in a VM (a VM snapshot keeps TCP state); the daemon's post-restore SIGUSR1 becomes a POST
//     `/freeze` with `X-Airlock-Host-Time`, which sets the guest clock (it stood still while saved).
//
//   - **Fork and named snapshots** (`runtime.Cloner` + `runtime.LayerSaver`, `clone.go`). While the
//     parent is checkpointed, each child gets sparse copies (`cp --reflink=auto --sparse=always`,
//     owner kept) of its qcow2 overlay (the template base image stays shared), its guest-RAM file
//     and its config disk, a TAP in the child's own netns, and a `vm.json` with the child's
//     address. The child restores from the parent's device state with its own RAM file mapped
//     `share=on` like any VM: the copy holds only pages the parent's guest had touched, the child's
//     resident memory is only what its guest touches again, and a child pauses, resumes and forks
//     like any VM (root test, 256 MB VMs under TCG: RAM mapping ~23 MB PSS per child, whole VMM
//     ~69 MB PSS, most of it QEMU/TCG's own; why not one frozen file shared by all siblings: DECISIONS).
//     `SaveLayer` copies the same files plus `vm.json` into the snapshot dir; `CloneSaved` is
//     `Clone` from it. The MAC stays the parent's (it is in the saved virtio-net state): each child
//     has its own netns, so equal MACs never meet (the TAP/tc-mirred setup is per netns).
//
//   - **Re-addressing a clone**: the restored guest still holds the parent's IP (guest kernel
//     state), which the host routes to the parent. `Clone` records the parent's address and gateway
//     in the child's `vm.json` (`Pending`). `Restore` of such a VM, inside the child's own netns,
//     removes the TAP's ingress mirred (guest frames now reach the netns stack) and puts the
//     parent's gateway address on the TAP; after `cont` the runtime dials from inside the netns
//     (a thread in `setns`) the agent at the parent's address and POSTs `/freeze` with
//     `X-Airlock-Host-Time`, `X-Airlock-Guest-Addr: <child ip>/<bits>` and
//     `X-Airlock-Guest-Gateway`. The agent (only as a microVM's init) answers 204, then 50 ms later
//     replaces eth0's IPv4 addresses and default route via netlink (`vminit.Readdress`). The runtime
//     then takes the gateway address off the TAP, restores the mirred, and clears `Pending`: the
//     daemon's usual SIGUSR1 → `/freeze` (clock) already goes to the child's own address. No
//     traffic leaves the child's netns during this; the parent is never addressed.
//     Timing (root test, TCG, 256 MB): clone 20–56 ms, clone + restore + re-address 0.32–0.70 s.
//     `bench/runtime.sh -n 2` (one run, both daemons side by side, 2 shared cores, TCG, 512 MB
//     VMs; p50 / p99): fork ×1 → child ready gVisor 433 / 472 ms, microVM 426 / 537 ms; fork ×4 →
//     children ready gVisor 716 / 872 ms, microVM 1107 / 1538 ms; host PSS per fork child (×4)
//     gVisor 44.7 / 46.4 MiB, microVM 80.1 / 82.4 MiB (baseline from the same run: an idle created
//     sandbox is 36.6 MiB under gVisor, 197.8 MiB as a booted microVM).
//
//   - **Not supported on microvm yet**: Firecracker. (Dockerfile builds work: see "Dockerfile builds
//     on the microVM runtime".) Forks of microVMs copy the overlay and RAM file (ext4 here has
//     no reflink: the copy costs what the parent's guest had written; no qcow2 chain on a frozen
//     parent overlay yet).
//
//   - **Tests**: `internal/runtime/microvm` root test boots the real agent on a busybox root and
//     checks the guest kernel release, virtio devices, hostname/resolv.conf/env, the jail (the VMM's
//     `/proc/<pid>/root` holds only the jail, host paths such as the sandbox dir, `/etc/shadow`,
//     `/var/lib` do not exist for it; uid 65534, no capabilities, seccomp, own mnt/pid/net
//     namespaces), the cgroup, the grown root file system, and that `kill -9` of QEMU reads as
//     stopped with the reason; `TestCheckpointRestore` pauses for 3 s and resumes (a background
//     process and a file survive, the state file is small, the clock is within 2 s);
//     `TestCloneTwoChildren` checkpoints a parent, clones two children into their own netns,
//     restores them and the parent: each child is at its own address (eth0 shows it), sees the
//     parent's file and background process, writes stay isolated, and a clone pauses/resumes; it
//     logs PSS per child (asserted only to be below the RAM size);
//     `TestGuestPanicIsReported` crashes the agent (PID 1) with SIGABRT: the guest kernel panics, the
//     VM ends within seconds and `StopReason` says the guest kernel panicked; `TestProbe` boots the
//     jailed probe under TCG and shows the KVM probe failing here; `TestChoose` covers both probe
//     outcomes for each mode (and `--runtime microvm` refusing when the TCG probe fails too);
//     `TestJailDevicesIgnoreHostModes` sets the host's `/dev/net/tun` and `/dev/kvm` to `0600
//     root:root`, then `/dev/kvm` to `0660 root:kvm` (restored afterwards), and in each case checks
//     as the jailed uid 65534 that the jail's `/dev` is exactly `kvm net null urandom zero` + `net/tun`,
//     that `/dev/kvm` answers `KVM_GET_API_VERSION` and `TUNSETIFF` attaches the TAP, then boots a
//     microVM whose agent answers; `TestVMMDiesEarlyFailsFast` gives QEMU a bad `-device` and gets
//     a `StoppedError` naming it in ~0.3 s; `TestCheckAgentRefusesDynamicAgent`. `scripts/test-microvm.sh`
//     (a stage of `scripts/test.sh`) starts a second daemon with `--runtime microvm` (prefix `alvm`,
//     subnet 10.80.0.0/16, templates shared by hard links) and runs `test/e2e/microvm.test.mjs`
//     with the `e2b` SDK: health, `uname -r`, virtio, commands, env vars, files, PTY, kill, command
//     timeout, `betaPause` + `Sandbox.connect` (process and file survive), sandbox timeout;
//     `test/e2e/microvm-templates-sdk.test.mjs` (an SDK `Template.build`: `fromTemplate('base')`, a
//     `copy`, a `runCmd` whose layer comes from the build VM's disk, `setEnvs`; then
//     `Sandbox.create('name:v1')` sees the files, their owner and the env; it adds ~9 s to the stage
//     here, TCG: the build 4.9 s cold, the rest the sandbox's boot); and
//     `test/e2e/microvm-interpreter.test.mjs` (code-interpreter-v1 from its boot snapshot and a
//     warm pool: see "Code interpreter, boot snapshots and the warm pool on microVMs").
//
//   - **Bench** (`bench/runtime.sh` → `bench/cmd/runtime-bench`, two daemons, interleaved, same run,
//     2 cores shared with other engineers' workloads, TCG, n=10 sandboxes each, 100 command RTTs):
//
//     | | gVisor p50 / p99 | microVM (TCG) p50 / p99 |
//     |---|---|---|
//     | create → agent ready | 258 / 664 ms | 2484 / 14447 ms (p99: the first create builds the base image) |
//     | first command after create | 23 / 60 ms | 101 / 723 ms |
//     | command round trip | 15 / 177 ms | 53 / 1139 ms |
//     | host RSS per idle sandbox | 53 MiB | 199 MiB |
//     | host PSS per idle sandbox | 21 MiB | 197 MiB |
//     | pause | 108 / 664 ms | 35 / 278 ms |
//     | resume → agent ready + a command | 1967 / 2392 ms | 426 / 1815 ms |
//
//     Firecracker's anchors on real KVM (≤125 ms to init, ≤5 MiB VMM overhead) are not reachable
//     under TCG; the same command lines take `-accel kvm` where the probe passes.
//
// # Code interpreter, boot snapshots and the warm pool on microVMs
//
// The interpreter, boot snapshots and the warm pool need nothing runtime-specific: the microVM
// runtime implements `runtime.Checkpointer`, `Cloner` and `LayerSaver`, so `--boot-snapshots`
// (default on) and `--warm-pool` work there as under gVisor. A boot snapshot is a microVM
// checkpoint (device state + the guest-RAM file + overlay + config disk, see "Fork and named
// snapshots"); a create from it, and a pool fill, is `CloneSaved` + restore + re-address (the
// fork-child path). Checked on the emulated (TCG) microVMs of these hosts with
// `@e2b/code-interpreter`: Python state across cells, a matplotlib PNG, a DataFrame (html +
// text), a traceback, JavaScript and Bash contexts, pause/resume and fork keeping Python and JS
// state, `E2B_SANDBOX_ID` of the new sandbox inside the warm kernel. The code-interpreter-v1 boot
// snapshot takes 25–47 s under TCG (the first start also builds the 2.6 GB root image: +15 s);
// later starts reuse it in ~0.3 s unless the agent binary changed.
//
// What a restored VM needs beyond the restore itself:
//
//   - **Fresh randomness.** A restored VM resumes with its guest kernel's CRNG exactly as saved, so
//     without a reseed every copy would read the same `os.urandom` and `/dev/urandom` (and the
//     interpreter, which reseeds Python's generator from `os.urandom` on a new sandbox id, the same
//     `random.random()`). QEMU's `microvm` machine has no VM generation ID device (it needs ACPI). After
//     every restore the daemon's post-restore `POST /freeze` (clock, and address for clones) makes
//     the agent (`vminit.Reseed`, `internal/envd/vminit/entropy_linux.go`) read 64 bytes from
//     `/dev/hwrng` (virtio-rng: this VM's own QEMU reads them from the host kernel after the
//     restore), add them credited (`RNDADDENTROPY`) and force a CRNG reseed (`RNDRESEEDCRNG`, which
//     also invalidates the per-CPU generators and batched entropy). If that fails the agent answers
//     500 and the runtime's `Signal` returns an error, so the restore fails (a boot-snapshot create
//     then cold-boots; the pool does not keep it) instead of handing out a VM with shared
//     randomness. Still shared, as under gVisor: JavaScript's `Math.random` state in a warm Node
//     context, other in-process seeds, the kernel hostname.
//
//   - **The interpreter's port first.** The daemon hands a sandbox out once 49983 answers, so the
//     agent opens 49999 before it (both runtimes; the kernels still start in the background).
//
//   - **Killing a VM that touched a lot of RAM**: the VMM's threads may still be exiting after its
//     main thread is gone, so `removeCgroups` SIGKILLs what is still listed and retries for up to
//     5 s before it removes the cgroup dirs.
//
// **Tests**: `scripts/test-microvm.sh` runs its daemon with `--templates base,code-interpreter-v1
// --warm-pool code-interpreter-v1=1` and also `test/e2e/microvm-interpreter.test.mjs` (the daemon
// log path is passed in `AIRLOCK_TEST_VM_DAEMON_LOG`): it waits for "boot snapshot ready" and
// "warm pool: sandbox ready"; a default create is served "from the warm pool" (state across
// cells, PNG, DataFrame, traceback, JS, Bash); two `allowInternetAccess: false` creates are
// "created from a snapshot … boot snapshot of code-interpreter-v1" and have distinct
// `E2B_SANDBOX_ID`s, addresses, `random.random()` and `os.urandom()`; a `memoryMB: 513` create
// cold-boots ("sandbox created", no snapshot) and runs a cell; pause/resume keeps Python and JS
// state, and two fork children keep it, see their own id and draw different random numbers. The
// stage took 1m58s–2m08s in two runs (the interpreter file 73 s of it, 32 s of that the cold
// boot's first cell; the boot snapshot is made while `microvm.test.mjs` runs).
//
// A cold microVM create is ready in ~1.4 s (the agent answers), but the first cell then waits
// for ipykernel to start and import under emulation: 15–27 s. The boot snapshot turns that
// into 0.9 s (restore of the VM, re-address, reseed, `/init`, the cell), close to gVisor; the
// daemon claims a pooled VM in 12–17 ms (its log), and the rest of the 336 ms is the first
// cell in the restored guest. Timed separately (4 pool creates, SDK side): create 23–135 ms,
// first cell 351–525 ms, second 100–277 ms, third 62–117 ms. Two causes: before the first
// cell the interpreter runs one silent execution that applies the new env vars and reseeds
// Python's generators, and a freshly restored QEMU starts with an empty TCG translation cache,
// so the guest's code is translated again as it first runs. Both are emulation costs that shrink or vanish under KVM.
// A pool refill (clone + restore + agent healthy) took 0.66–0.83 s (one 1.39 s). Under KVM the
// guest side shrinks by the TCG factor; the "~50 ms from a template snapshot" is the daemon's
// claim from the pool (12–17 ms here), not yet create → first result under emulation.
//
// Measured figures: bench/README.md, "Code interpreter, boot snapshots and the warm pool on microVMs".
package microvm
