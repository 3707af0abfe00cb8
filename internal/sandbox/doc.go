// Package sandbox is the sandbox manager: it creates sandboxes (template →
// network → runtime → agent /init → store), tracks their timeouts, kills them
// and re-attaches to running ones after a daemon restart.
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # internal/sandbox, file by file
//
// The `Manager` (`manager.go`) keeps the index (id → `*Live`), the network slots and the policies
// (limits, timeout bounds `CheckTimeout`, warm pool, reaper). A live sandbox is one object, `Live`
// (`live.go`), that acts on itself: a caller looks it up and calls it —
// `sb, err := mgr.Lookup(id)`, then `sb.View()`, `sb.Kill(ctx)`, `sb.SetTimeout`, `sb.Refresh`,
// `sb.Connect`, `sb.Pause`, `sb.PauseFilesystem`, `sb.Resume`, `sb.EnsureRunning`, `sb.Exec`,
// `sb.ProcessClient`, `sb.Stats`, `sb.SetNetwork`, `sb.EgressLog`. The manager keeps four one-line
// wrappers that interfaces of other packages need (`Kill`, `Exec`, `Dir` for
// `imagebuild.Sandboxes`, `ProcessClient` for the console), and the operations that create
// something new in its index or snapshot store (`Create`, `Fork`, `CreateSnapshot`).
//
// Locks: the manager's `mu` guards the index, the slots and `closed`; each `Live` has its own `mu`
// for its record, address, timer, operation and `gone` flag. Order: manager, then sandbox, never
// the reverse. Removing a sandbox from the index (`unindex`, `expire`, `reap`) holds both and marks
// it gone, so a holder of the sandbox's lock alone knows whether it is still indexed. Locks are not
// held across runtime or network calls, except that a sandbox's timeout and egress policy are
// written to the store (and the firewall) under its own lock.
//
//	| file | what it is |
//	| --- | --- |
//	| `manager.go` | `Config`, `Manager` (index, slots, policies), `New`, list, `CheckTimeout`, `waitAgent`, close |
//	| `live.go` | `Live`, one live sandbox, and its lock order: `Lookup`, `unindex`; record, guest address, expiry timer (`armLocked`, `stopTimer`, `rearm`, `expire`), `Kill`, timeouts, `Connect`, `Exec`, `ProcessClient`, `Stats`, egress policy and log; the read-only view (`Sandbox`) |
//	| `oplock.go` | one pause/resume/fork/snapshot at a time per sandbox (`Live.beginOp`, `beginLocked`, `endOp`, `inOp`) |
//	| `create.go` | `Create`: checks the request, resolves the template, picks a strategy; the shared `register` step |
//	| `create_cold.go` / `create_restore.go` / `create_snapshot.go` | the three strategies (table above); `create_restore.go` also holds the restore steps (`prepareChild`, `wakeChild`, `registerChild`) |
//	| `teardown.go` | a kill: out of the index, a journal entry, the row's deletion queued (deleted in the background, parallel kills' rows in one statement; before the answer only for a paused sandbox of a cluster node or one whose image is in the artifact store), the runtime's `Stop` (SIGKILL sent to every process of the cgroup or to the VMM, no wait for their exit) and the network's `Cut` (an nftables set, no rtnetlink call) — then it answers, and the observers (metrics, the event log's files) are told; two background workers (yielding up to 2 s to creates in progress) wait for the processes to exit (`WaitStopped`), then destroy the runtime instance (unmounts, cgroups) and the network, wait for the row to be gone, free the slot and record the teardown finished, retrying with backoff; `Reattach` finishes what the journal lists (a row still there is deleted at once, never re-attached) |
//	| `killjournal.go` | the teardown journal: one append-only file `<data>/teardown/journal.log` of JSON lines (an entry per kill, a `done` line per finished teardown), parallel kills' appends in one write (group commit), not fsync'd (it must survive the daemon's death; after a host crash no sandbox whose row it would guard comes back, see the file's comment); rewritten with the open entries at start and past 256 KiB; a torn last line is skipped; the previous format (`teardown/<id>.json`) is read and folded in |
//	| `steps.go` | the forward steps: a create, pause or resume is an ordered list of named steps (`steps.run`), each timed to the debug log and `/metrics` (section "Forward steps") |
//	| `cleanup.go` | `undo`, the cleanup stack of named steps (runtime instance → network → slot → store record → observers, newest first; a step whose prerequisite failed is skipped so the next start retries it); `giveBack.push` puts a sandbox's whole stack on before its create or restore takes anything (each step undoes nothing that was never taken), and `release` runs it |
//	| `checkpoint.go` | checkpoint a live sandbox (`checkpointLive`: clear image → `/freeze` → checkpoint → drop the sandbox the runtime stopped), restore it in place (`restoreInPlace`, `bringBack`), `readdress` |
//	| `pause.go`, `pausedisk.go`, `fork.go`, `snapshot.go` | pause/resume (memory; disk only: `Live.Pause`, `PauseFilesystem`, `Resume`, `EnsureRunning`), fork and named snapshots (`Manager.Fork`, `CreateSnapshot`: they look the source up and take its operation lock); the work on the sandbox (`pause`, `pauseDisk`, `resumeDisk`, `capture`) is the sandbox's, and each calls `checkpoint.go` |
//	| `bootsnap.go`, `pool.go` | boot snapshots (made with `capture`), the warm pool (filled with the restore steps) |
//	| `record.go`, `template.go`, `files.go` | the record's lifecycle values and `Extra` codec; `Template` and a sandbox's template; link/copy/fsync/disk usage |
//	| `hooks.go`, `move.go` | a cluster node's side of pause, resume and snapshots: `NodeHooks` (`Config.Node`, nil on a single host; internal/cluster/node implements it) and where the core calls it — a pause tells the node (`Paused`; a restart `Reattached`, a resume `Resuming`, a kill `Gone`, `Close`), which exports the image (`ExportPaused` over `Live.WriteImage`) and records it (`Live.CommitUpload`) in the background; the claim and resume of an imported one (`ClaimAdopted`, `ResumeImported`), one sandbox's evacuation (`Live.Evacuate`), the primitives a node drops moved sandboxes with (`LiveList`, `Live.IdleWithImage`, `Live.Drop`); the upload runner, the loops and the node API over them are internal/cluster/node's (`upload.go`, `moves.go`) |
//	| `volumes.go` | a create's volume mounts: checked before any setup, resolved to host directories (`Config.Volumes`), kept in the record (`extra.volumes`) and a snapshot's spec, passed again at every restore; creates with volumes cold-boot |
//	| `reattach.go`, `interrupted.go`, `reaper.go`, `watch.go` | reattach after a daemon restart (and finish a cut-short pause or fork), reap sandboxes that stopped on their own |
//	| `agent.go`, `agentclient.go`, `exec.go`, `startcmd.go` | the guest agent seen from the manager (`/init`, `/freeze`, processes), a template's start and ready commands |
//	| `limits.go`, `diskfull.go`, `netpolicy.go`, `events.go`, `eventstore.go`, `agentlog.go`, `observer.go`, `manifest.go`, … | limits, host disk checks, egress policy, lifecycle events and logs, metrics hooks, snapshot manifests |
//
// # Forward steps
//
// A create, a pause and a resume are each an ordered list of named steps (`steps.go`, after
// firecracker-go-sdk's handler lists): `steps.run` runs them in order, and the first that fails
// stops the list, runs the list's cleanup (if it has one) and returns that step's own error. The
// cleanup stacks of `cleanup.go` are unchanged: a forward step that takes what a cleanup step gives
// back has its name (`network`). Every step writes one debug line (`msg=step sandbox=… op=… kind=…
// step=… elapsed=…`, `step failed` with `err` when it failed), and a step that succeeded is
// observed in the histogram `airlock_sandbox_step_seconds{op,kind,step}` on `/metrics` (the daemon's
// Observer is a `StepObserver`). These names are stable (dashboards and the e2e test
// `TestStepMetrics` use them):
//
//	| op | kind | steps, in order |
//	| --- | --- | --- |
//	| `create` | `cold` | `network` (namespace, veth, firewall), `start` (boot the template), `wait` (agent `/health`), `init` (`/init` and the template's start command), `register` (store row, index, timer) |
//	| `create` | `restore` (boot snapshot), `snapshot` (named snapshot), `fork` (a fork child) | `network`, `clone` (copy the saved writable layer), `restore` (the runtime restores the memory image), `wake` (the agent listens again: the datagram `airlock-wake thaw` to its wake port, UDP 49982, or SIGUSR1 through `runsc kill` as the fallback), `wait`, `init` (`/init`: new id, token, env vars, clock), `register` |
//	| `create` | `pool` (warm pool) | `claim` (take a pooled sandbox, or wait for one being filled), `init`, `register` |
//	| `pool` | `fill` | `network`, `clone`, `restore`, `wake`, `wait` (a pooled sandbox made ahead of its create) |
//	| `pause` | `memory` | `space` (the host's disk has room for the image: the sandbox's memory use, read from the runtime), `clear` (old image), `freeze` (the guest's `/freeze`), `checkpoint` (the runtime writes the image), `commit` (the row says paused) |
//	| `resume` | `memory` | `readdress` (the guest address back into the namespace), `restore`, `wake`, `wait`, `commit` (image removed, the row says running) |
//	| `resume` | `imported` | `network`, `clone`, `restore`, `wake`, `wait` (a cluster node resuming an image another node made) |
//	| `fork`, `snapshot` | `parent` | `clear`, `freeze`, `checkpoint` (the source's checkpoint; its restore in the background is not timed) |
//
// A kill is timed the same way, with `op=kill` (`teardown.go`): kind `answer` has the steps before
// the kill answers, `index`, `journal`, `stop` (SIGKILL sent), `cut` (the nftables cut), `row` (only
// when the row goes before the answer), `log`, and `total` (the whole kill inside the daemon); kind `teardown` has the background
// teardown's `exit`, `runtime`, `network` and `row`. `bench/soak` prints them as its `kill step:` and
// `kill teardown:` rows.
//
// What lies between the steps is not timed: the request's checks, id and token generation and the
// slot (microseconds), a named snapshot's download on a cluster node, and a cluster pause's upload.
// Filesystem-only pauses and resumes (`pausedisk.go`) are not steps yet. So the create steps' sum
// is a little below `airlock_sandbox_create_duration_seconds` (fork children are not creates and
// are not in that histogram). Figures: bench/README.md, "Steps of a create, a pause and a resume".
//
// # Restart
//
// On start, `airlock serve` lists sandboxes in the store and in the runtime, and the kills whose
// teardown the previous run left in its journal (`teardown.go`: never re-attached, finished now or in
// the background); the others alive in both are re-attached (timers re-armed, proxy routes restored); paused ones whose netns and
// checkpoint image exist are re-attached as paused; everything else is
// destroyed (runtime state, overlay mounts, netns, veth, store rows). Internal sandboxes whose owner
// died with the daemon are destroyed even when alive: the one a boot snapshot was being made from
// (`airlock.internal=boot-snapshot`) and a template build's step sandboxes (`airlock.build=<name>`;
// their scratch root filesystem is removed at start) (`TestDaemonKilledMidTemplateBuild`).
//
// **Agent builds across upgrades.** A sandbox maps its agent's code from the host file for its
// whole life, and a restore (resume, fork child, named or boot snapshot) maps that file again and
// jumps back into the saved memory, so a restore needs the very build it was saved with (DECISIONS).
// `serve` installs `--envd-path` as
// `agents/<sha256>/airlock-envd` (`internal/agentbin`, temp file + fsync + rename) and runs
// sandboxes from that path; each sandbox record (`extra.agent`) and snapshot spec (`agentPath`)
// keeps the path it was started with, and fork children and snapshot restores get that path back
// (`Manager.agentOf`). A boot snapshot made with another agent is made again (creates should get
// the current agent). After Reattach and InitSnapshots, agents nothing refers to are removed
// (`Manager.AgentsInUse`, `agentbin.GC`). Records from before this change carry no agent path and
// use the current one. Test: `TestAgentUpgradeKeepsSavedSandboxes` (test/gohttp) restarts the
// daemon on an unoptimised build of the agent: the paused sandbox resumes with its memory on the
// old agent, its fork child maps the old agent, new sandboxes and the code-interpreter create get
// the new one. `AIRLOCK_RUNSC_DEBUG_LOG=<dir>` keeps runsc's debug logs per sandbox for such
// diagnoses.
//
// **Logs across restarts.** A re-attached sandbox (running or paused) gets its lifecycle events and
// egress audit log back from `logs/` (see "Logs on disk"); the logs of sandboxes that did not come
// back are removed at the end of `Reattach`.
//
// # Pause, resume and fork
//
// Runtimes that can save a sandbox implement `runtime.Checkpointer` (Checkpoint, Restore,
// Signal) and, for fork, `runtime.Cloner`; the manager detects them with a type assertion
// and otherwise answers 501 naming the runtime (`the "fake" runtime cannot pause …`).
// gVisor does it with `runsc checkpoint` / `runsc restore --detach` (restore is started like
// `run`: own session, stdio on files).
//
// **Filesystem-only pause** (E2B's `sbx.pause({keepMemory: false})` = `POST /sandboxes/{id}/pause
// {"memory": false}`; lifecycle `onTimeout: {action: 'pause', keepMemory: false}` = create-body
// `autoPauseMemory: false`; `internal/sandbox/pausedisk.go`). Runtimes that implement
// `runtime.Rebooter` (Shutdown, Boot) keep the disk and drop the memory: the manager runs
// `airlock-envd -sync` in the guest as root, the runtime shuts the sandbox down (microVM: QMP
// `quit`, so QEMU flushes the qcow2 metadata, SIGKILL after 10 s; the guest RAM file is truncated;
// the TAP, overlay, config disk and `vm.json` stay), the host's pooled connections to the guest are
// dropped, and the record is `paused` with `extra.diskOnly`. No memory image is written, so such a
// sandbox costs only its disk. `connect`/resume boots it fresh on the kept disk (microVM: the same
// machine, the kernel's `ip=` rebuilt from `vm.json`'s current address, a fork child's included,
// the config disk's clock renewed), waits for the agent, sends `/init` again with the sandbox's
// token, env vars and template defaults, and runs the template's start command: files stay,
// processes are gone, `boot_id` changes. A failed boot shuts it down again (still paused). A
// restarted daemon re-attaches such a sandbox when its runtime dir exists. gVisor: `Shutdown` is
// `runsc kill` + `delete` (the writable layer and the overlay stay mounted on the host), `Boot` is
// `runsc run` of the kept bundle. Runtimes without `Rebooter` answer 501. E2e:
// `fspause.test.mjs` (gVisor) and `microvm.test.mjs` (pause/connect and the timeout lifecycle).
//
// **Open TCP sockets.** runsc saves every TCP endpoint
// (`pkg/tcpip/transport/tcp/endpoint_state.go`): listening and loopback endpoints come back as they
// were; connected endpoints over eth0 (no save/restore capability) are reset at the restore, as a
// peer outside cannot follow the sandbox anyway. So a sandbox pauses and forks whatever sockets it
// holds:
//
//   - e2e `checkpoints with open TCP sockets` (snapshots.test.mjs): a loopback echo server and a
//     client holding a connection open survive pause/resume (the old connection still echoes
//     after the resume, new ones are accepted) and fork ×2 (the server accepts in both children
//     and in the parent);
//
//   - done, because it is cheap and keeps both ends consistent: every host→guest
//     connection (daemon agent client and proxy transport) goes through `internal/guestconn`
//     and is reset with SO_LINGER 0 before a checkpoint, and the agent answers `POST /freeze`
//     (internal path, never proxied): it closes its listeners (49983 and 49999), waits up to
//     3 s for its own connections to go (logs, never refuses), and after the restore the
//     daemon wakes it and it listens again: a datagram to its wake port (UDP 49982, kept open
//     through the checkpoint; `internal/envd/wake`, `internal/guest/wake.go`, re-sent every
//     25 ms until the agent echoes it), or SIGUSR1 through `runsc kill` when the address is
//     unknown, nothing listens there (an older agent) or no echo came in 2 s
//     (`internal/runtime/gvisor/wake.go`; an automatic thaw after 30 s covers a daemon that
//     died in between);
//
//   - the code interpreter still talks to ipykernel over ZeroMQ `ipc://` and without the
//     IOPub "pipe" TCP socket (harmless either way);
//
//   - the reaper skips a sandbox with a pause/resume/fork/snapshot in progress: runsc
//     reports it stopped while it is being checkpointed.
//
//   - `runsc --network=sandbox` moves eth0's address into the netstack and removes it from
//     the namespace, and a restore builds its network from the namespace. Before every
//     restore `network.Manager.Readdress` puts the slot's address and default route back
//     (optional `sandbox.Readdresser` interface). The restored kernel uses the new stack, so
//     a fork child restored into another namespace gets that namespace's address: every
//     sandbox keeps its own slot; no shared guest address or DNAT is needed.
//
//   - `runsc delete` of the checkpointed container takes ~1–2 s (it polls for the sandbox
//     process); it runs in the background after a pause and Restore/Destroy wait for it.
//
//   - **Image format, compression, lazy restore** (pinned runsc; bare runsc, a python3 process
//     with pandas loaded, systrap, two runs): the image is `checkpoint.img` + `pages.img` +
//     `pages_meta.img`, uncompressed by default (`--compression=none`): checkpoint 55–58 ms,
//     restore 105–124 ms, 39.4 MiB. `--compression=flate-best-speed` gives one 10.9 MiB file but
//     checkpoint 285–289 ms and restore 266–270 ms; runsc 20221219 always compressed (11.4 MiB,
//     504 ms / 483 ms on ptrace). Airlock keeps the default: 5× faster for 3.6× the disk, and
//     snapshot directories are hard links or reflink copies. `runsc restore --background` (page
//     loading continues after `restore` returns; needs an uncompressed image) gained nothing
//     measurable at this size (115–132 ms vs 105–124 ms), so it is not used: it would also make
//     the image's lifetime matter after the restore returns. `--direct` (O_DIRECT) is not used
//     either (the images are read once, from the page cache when just written).
//
//   - **Flags.** Airlock passes `--overlay2=none` (above). The pinned runsc's other defaults suit it: `--directfs` (the sentry opens files itself; user
//     xattrs work through it), `--file-access=exclusive` for the root (nothing writes the layer
//     from the host while a sandbox runs; layer copies happen while it is checkpointed and
//     frozen), `--gofer-network-namespace=null`. Memory images restore only under the runsc build that saved
//     them (the state format is gVisor-internal and versioned with it; see boot snapshots).
//
// **Pause** (`POST /sandboxes/{id}/pause`, 204; 409 already paused or busy; 404): stop
// the timer, reset guest connections, `/freeze`, checkpoint to `<dir>/checkpoint/` (on a cluster node
// with `--artifacts`, then upload the image: see "Moving sandboxes between nodes"). The
// netns, veth and slot are kept (so the address, firewall state and routes stay valid and
// a resume needs no network work beyond the readdress); disk.img and the overlay stay
// mounted. Memory and CPU are released (the sandbox and gofer processes exit). State
// `paused` in GET /sandboxes/{id} and lists; paused sandboxes do not expire. Kill of a
// paused sandbox removes everything. `{"memory": false}` is 501.
//
// **Resume** (`POST /sandboxes/{id}/resume` 201 / 409 running; `connect` on a paused
// sandbox resumes it and answers 201): readdress, `runsc restore`, the wake (datagram, else SIGUSR1), wait for
// `/health`, delete the image, re-arm the timeout. Processes continue where they were;
// files, interpreter variables and background processes are there.
//
// **Lifecycle**: `autoPause: true` (SDK `lifecycle.onTimeout: 'pause'`) makes the timeout
// pause instead of kill (if the pause is refused the sandbox is killed);
// `autoResume: {enabled: true}` lets proxied traffic to a paused sandbox resume it (the
// request waits, up to a minute; 5 min timeout after such a resume). Without autoResume,
// traffic to a paused sandbox gets the proxy's 502 "not reachable".
//
// **Fork** (`POST /sandboxes/{id}/fork {count ≤ 100, timeout}` → 201
// `[{sandbox}|{error}]`, E2B's limit): only the children whose memory fits in the host's
// `MemAvailable` (each `memoryMB` + 64 MiB, 512 MiB left free) are attempted; each of the others gets
// an error entry (503 `not enough host memory for fork child i of n …`), as E2B answers per child.
// Freeze + checkpoint the parent; for every child allocate id,
// token, slot and netns, and `Clone` the parent dir (disk.img copied with
// `cp --reflink=auto --sparse=always` while the parent's layer is FIFREEZE-frozen, then
// mounted, new overlay and bundle); restore the children (4 at a time) from the parent's
// image, the wake (datagram, else SIGUSR1), `/health`, then `/init` with the child's token (authorised by the
// parent's token), env vars with the child's `E2B_SANDBOX_ID`, and the clock. The parent
// is restored under its own id in the background (its API and proxied requests wait for
// it) and keeps its expiry. Its operation ends only once every child has restored and the fork
// image is removed (`bringBack` runs the clean-up before `endOp`), so a pause, fork or snapshot of
// the parent asked for meanwhile waits instead of clearing the image under restoring children
// (unit `TestForkParentOperationLastsUntilChildrenRestored`). What stays shared: everything in memory at fork time —
// Python's `random` state and any in-process seeds, the kernel hostname (`uname -n` shows
// the parent id; `/etc/hostname` is the child's), `/proc` uptime. Kernel randomness
// (`getrandom`, `/dev/urandom`) comes from the host and differs per child. Each child's
// memory image is loaded separately (no copy-on-write sharing of memory on this runsc).
// A daemon SIGKILLed during that copy (or a named snapshot's) leaves the parent's layer
// filesystem frozen, and a parent restored from its image would block on its first disk write:
// the gVisor runtime thaws a left-over freeze before every restore and destroy (`thawLayer`) and
// before freezing again (`copyFrozen`); root test `TestThawLayerLeftFrozen`, and the
// kill-during-pause/fork e2e writes to the sandbox's disk after the restart. A parent killed while
// it is being restored in the background is not an error (its restore fails once Kill removed the
// runtime state), and its store row stays deleted (unit `TestForkParentKilledDuringItsRestore`).
//
// Measured figures: bench/README.md, "Pause, resume and fork".
//
// # Named snapshots, boot snapshots and the warm pool
//
// Code: `internal/sandbox/snapshot.go` (named snapshots, `capture`), `create_restore.go` (`restoreFrom`, the restore path), `create_snapshot.go` (a create from a named snapshot), `checkpoint.go` (the freeze → checkpoint step capture shares with pause and fork),
// `manifest.go` (hashing), `bootsnap.go`, `pool.go`; runtime side
// `runtime.LayerSaver` (gVisor: `SaveLayer`/`CloneSaved` in `clone.go`); store side
// `store.SnapshotStore` (SQLite table `snapshots`, migration 2).
//
// **Capture** (shared by named and boot snapshots): the sandbox is frozen and
// checkpointed exactly like a fork parent (`/freeze`, `runsc checkpoint`), its writable
// layer is copied into `snapshots/.tmp-<id>/` (`disk.img` with `cp --reflink=auto
// --sparse=always` under FIFREEZE), the memory image is hard-linked in (`checkpoint/`),
// every file is hashed into `manifest.json`, and the directory is renamed into place
// (then the parent dir is fsynced). The source sandbox is restored in the background
// (named snapshots; its API and proxied requests wait for it) or destroyed (boot
// snapshots). The digest is `sha256-blocks`: SHA-256 over the non-zero 4 KiB blocks of
// a file, each prefixed by its offset, then the size — equal for equal contents whatever
// the sparseness, and a sparse 10 GiB layer image hashes at the cost of its data.
//
// **Named snapshots** — `POST /sandboxes/{id}/snapshots {name?}` → 201
// `{snapshotID, names[], sandboxID, templateID, sizeBytes, createdAt}`: 404 unknown
// sandbox, 409 paused / busy (pause, fork, snapshot in progress) / not running in the
// runtime (a dead sandbox not yet reaped), 400 bad name (`[a-z0-9][a-z0-9._-]*`, ≤ 64),
// 409 for a name taken by a template; a name already used by another snapshot moves to
// the new one (that one keeps its id). Ids are `s` + 20 `[a-z0-9]`. `GET /snapshots?
// sandboxID&name&limit&nextToken` lists oldest first with an opaque `X-Next-Token`;
// `GET /templates` lists snapshots too (`"snapshot": true`); `DELETE /templates/{id or
// name}` deletes one (204; 404 unknown; 409 while a create is restoring from it);
// sandboxes made from it are independent copies and live on. A create whose
// `templateID` is a snapshot id or name (and no template) restores it: the fork-child
// path — new id, token (authorised by the token saved with the snapshot), slot,
// network and a copy of the saved layer; `runsc restore` of the saved image; the wake (datagram, else SIGUSR1);
// `/health`; `/init` with the new `E2B_SANDBOX_ID`, env vars (template + snapshot's +
// request's) and clock. The sandbox's `templateID` is the snapshot id; the template
// underneath is remembered (`baseTemplate` in the row's extra JSON) so it can be forked
// and snapshotted again. The template must still be the same build (409 otherwise).
//
// **Start-up check**: every snapshot row's directory is verified against its manifest.
// A snapshot that does not verify is kept but never used (creates get 409 "failed
// verification"; it is listed with `problem`, `airlock snapshot ls` shows it); a row
// whose directory is gone is deleted; directories without a row (including `.tmp-*`
// left by a crash) are removed. `airlock snapshot create <sandbox> [--name] | ls
// [--sandbox] | rm <id|name>...` (ls shows sizes and total disk usage).
//
// **Boot snapshots** (`--boot-snapshots`, default on where the runtime can
// checkpoint and save layers): once the daemon is ready, each `--templates` entry is
// booted (a hidden sandbox: not listed, never re-attached after a crash), its agent is
// healthy and — when port 49999 answers — one execution in the default Python context
// (kernel started, warm-up imports done, then its free heap handed back) has completed;
// then it is captured into `snapshots/boot-<template hash>/`. The JavaScript context is
// not run: its node starts on its first use, so the snapshot does not carry it. A template
// without an interpreter (no warm state, e.g. `base`) gets a boot snapshot only when
// it has a warm pool: restoring it is not faster than its ~0.2–0.3 s cold boot and a
// restored sandbox uses about twice the memory (below); such a template is recognised
// without booting it (no `ipykernel` under its root's dist-packages, the same test the
// agent uses to start the interpreter). On later starts
// a boot snapshot whose manifest verifies is reused (boot snapshots of other builds
// are removed; so is one saved by another build of the runtime: `runtime.ImageBuilder`, for gVisor
// `runsc-sha256:<16 hex>` of the runsc binary: an image is only meant for the runsc that saved
// it, and runsc's own check compares version strings, which module builds all report as
// `VERSION_MISSING`; without this a runsc upgrade would have every create try the old image; unit `TestBootSnapshotOfAnotherRuntimeBuild`. A
// named snapshot saved by another build answers 409 on create). A create of that template with the same resolved limits and public
// traffic allowed restores it instead of cold-booting; any failure (missing, restore
// error, unhealthy agent) is logged and the create cold-boots. Making a boot snapshot at
// start is tried up to three times (`retryBoot`: a slow emulated guest can miss the
// interpreter's warm-up once, and without it the template would cold-boot, with no warm
// pool, until the next restart). Dockerfile templates
// with a start command, user or workdir are not served from boot snapshots yet.
//
// **Fresh identity after a restore**: `/init` sets the sandbox id env vars, token and
// clock. The interpreter re-syncs env vars into each warm context before its next
// execution, and when `E2B_SANDBOX_ID` changed it reseeds Python's `random` and, if
// imported, NumPy's global generator from the kernel's entropy (tested: two sandboxes
// from one snapshot print different `random.random()`). Still shared with the source:
// JavaScript's `Math.random` state in a Node context started before a pause or snapshot, any other in-process seeds
// or secrets, the kernel hostname (`uname -n` and `/proc/sys/kernel/hostname` show the
// source's id; `/etc/hostname` and `/etc/hosts` are the new sandbox's), `/proc`
// uptime, and file contents (e.g. files under /tmp) — as with fork.
//
// **CPU of restored sandboxes**: `runsc events --stats` counts CPU after a restore too, from 0 at
// the restore, and Stats reads it as for any sandbox. e2e: `CPU is measured after a restore`
// (metrics.test.mjs).
//
// **Warm pool** (`--warm-pool <template>=<n>`, needs a boot snapshot): `n` sandboxes
// per template are kept restored and healthy but unclaimed: they hold an id, slot,
// network namespace and runsc container, but have no store row, no timer, are not
// listed and count against nobody. A create of that template (default limits, internet
// allowed, no allowOut/denyOut — the pool's network setup) pops one under the pool
// mutex (never handed out twice), sends `/init` and registers it; the filler restores a
// replacement after the claim (up to two restores at once per template: `poolfill.go`). SIGTERM drains the pool
// (destroys them; a fill under way finishes its restore first and gives the sandbox back); after a crash the next start destroys them as leaked (no row).
// Before a restored sandbox is offered, it runs one silent Python cell that also calls
// IPython's display formatters (`poolwarm.go`): the first request into a restored gVisor
// sandbox is the slow one, whatever it is, and this moves it off the claim (issue 24:
// first cell p50 190–380 → 27–61 ms, bench/README.md).
//
// **Automatic pool (the default).** Without `--warm-pool`, `code-interpreter-v1` gets a pool sized
// by the daemon (`Config.AutoWarmPool`, `poolTarget`): one more idle sandbox than the creates of
// that template in the last minute, at most 4 (`DefaultAutoWarmPoolMax`), so an idle daemon keeps
// one ready and a burst of creates grows it. It never fills into the host's last
// `PoolMemoryReserve` (1 GiB + a tenth of the host's memory, read as `MemAvailable`): a refill needs
// the sandbox's memory + 64 MiB on top of that, and below the reserve, or above the target once the
// demand fell, the filler gives one idle sandbox back per pass (every 2 s), so the pool yields to
// the sandboxes in use. `--warm-pool code-interpreter-v1=N` fixes the size, `=0` turns it off (the
// test suite's main daemon does: its leak checks count every runtime sandbox; the default is tested
// by `test/gohttp/warmpool_test.go` on a daemon of its own).
//
// **A create that finds the pool empty while a refill runs waits for that refill** (`awaitFill`, at
// most 30 s; one create per refill, the oldest refill that no other create waits for; others
// restore their own from the boot snapshot) instead of
// starting a second restore beside it: on a small host two restores at once take about as long as
// both in a row, so the waiting create is served sooner and the refill is not slowed. The claim log
// line says `waited_for_fill=true`. `bench/burst.mjs` (default flags, create → first `runCode` result,
// quiet 2-core VM, 2026-11-25): 50 in a row p50 165 / p99 295 ms (max 295; before this change p50 107,
// max 628 ms: fewer creates found an idle sandbox at once, but none paid for two restores on two cores;
// 39 of 64 pooled creates waited for a refill), against 330 / 445 ms for 50 boot-snapshot restores in
// the same run; 10 at once 2.2 s wall (3 rounds, 2210–2247 ms; before 2.5–2.8 s).
//
// The goal (< 150 ms p50) is met from the warm pool; a restore alone is ~0.7–1 s here
// (`runsc restore` of a ~38 MiB interpreter image on the ptrace platform). On a quieter
// moment (4 sequential creates each) the boot snapshot gave 845–891 ms and the pool
// 58–98 ms. Capturing a base sandbox took 160 ms (checkpoint 116 ms, layer copy 36 ms,
// 5 MiB on disk); an interpreter sandbox 0.8 s (38 MiB). Memory (PSS summed over every
// runsc process of the sandboxes, `/proc/*/smaps_rollup`): 20 idle forks of one base
// sandbox 572–582 MiB vs 20 fresh base sandboxes 283–284 MiB — restored sandboxes share
// no memory on this runsc (each loads its own copy of the image and touches every saved
// page), so forks and restored creates cost about twice the memory of fresh boots.
// For `base` a restore is not faster than its cold boot (≈ 0.2–0.3 s either way), hence
// boot snapshots only for templates with warm state (the interpreter) or a pool.
//
// Measured figures: bench/README.md, "Named snapshots, boot snapshots and the warm pool".
//
// # Reliability: dead sandboxes, and the suite that attacks the platform
//
//   - **Sandboxes that stop on their own.** `Manager.Reap` (started by `airlock serve`) asks the runtime every 3 s
//     whether each running sandbox still runs; a sandbox the runtime reports `stopped` or unknown (PID 1, the agent,
//     was killed from inside; runsc stopped it at its memory limit) is released exactly like a timed-out one, so the
//     API reports it gone (404, not listed) instead of `running`. The same loop destroys runtime sandboxes the
//     manager neither runs nor is creating (seen on two consecutive passes): a create cut short by a daemon SIGKILL
//     can be finished by the surviving `runsc` process after the next daemon's Reattach.
//
//   - **Requests to a sandbox that went away.** Every proxied request watches its sandbox (once a second); when the
//     resolver no longer knows it, the request's context is cancelled: before the response a 502
//     `{code,message,sandboxId}`, during a stream the connection is cut so the client sees an error at once instead
//     of waiting on a peer whose network namespace no longer exists.
//
//   - **Guest address reuse.** Network slots, hence guest IPs, are reused. The proxy remembers which sandbox last used
//     each address and closes the transport's idle connections when an address changes owner, so a new sandbox's
//     first request never rides a keep-alive connection pooled for the previous one.
//
//   - **Disk full on the data dir** (`internal/diskspace`, `internal/sandbox/diskfull.go`). Writable layers are
//     sparse images and pause images are written next to them, so the data dir's filesystem can fill up under
//     running sandboxes. `Manager.CheckHostDisk` (statfs of `sandboxes/`) refuses work when less than
//     `--disk-reserve-mb` (default 256 MiB; `-1`: only a completely full disk) or fewer than 256 inodes are free:
//     create (before any slot, netns or directory exists), pause and fork (which also need about the sandbox's
//     memory in use for the image: a gVisor checkpoint that cannot write its image stops the sandbox) and uploads
//     (the proxy asks before forwarding `POST /files` to envd) answer 507 `{code:507, message:"the host's disk is
//     full: X free of Y … (at least Z must stay free) …"}` (the SDKs' `NotEnoughSpaceError`). ENOSPC met half-way
//     (mkfs, runsc, cp, SQLite "database or disk is full") becomes the same 507 after the usual undo. Reads,
//     commands and running sandboxes are unaffected; work is accepted again as soon as space returns. Cost: one
//     statfs per create/upload; a pause or fork also reads the sandbox's memory use (one `runsc events`) —
//     `airlock-snapbench` after the change, shared VM: pause p50 134 ms / p99 217 ms against the same run's
//     create→first-command baseline 250 / 349 ms (before: pause 93–186 / 107–416 ms in earlier runs).
//     `test/gohttp/diskfull_test.go` starts its own daemon on `<data-dir>.diskfull` (the base template hard-linked,
//     `sandboxes/` a 48 MiB tmpfs, `--net-prefix x<suite prefix>`, the top /24 of `AIRLOCK_E2E_SUBNET`) and fills
//     the tmpfs from the host.
//
//   - **Daemon killed during a pause or fork** (`internal/sandbox/interrupted.go`). The stored state turns `paused`
//     only after a complete checkpoint; `runsc checkpoint`/`restore` started by a killed daemon keep running. At
//     start, Reattach first waits for such a process (`gvisor.Runtime.CheckpointInProgress`, from
//     `/proc/*/cmdline`, up to 5 min), then: a sandbox stored `running` that the runtime no longer runs but that has
//     a checkpoint image is resumed from it with the time it had left (a failed restore removes it: reported
//     gone); a sandbox the runtime runs with a checkpoint directory still next to it (restored, agent never woken)
//     gets the wake (datagram, else SIGUSR1; the runtime is told its address first, `runtime.GuestAddrKeeper`), a health check and its image removed. Fork children whose restore was cut are removed.
//
//   - **Templates: half-written builds and GC.** Builds write into `templates/.tmp-*` and are published by an
//     atomic rename with `meta.json` inside; the record is written after it, so a half-written template is never
//     listed or resolvable. At start, leftovers are removed after SIGKILLing processes still working in them
//     (cmdline, root or cwd inside; mmdebstrap's apt/dpkg can outlive the daemon). `template.Manager.GC` removes hash
//     directories that no template record (its hash, or a Dockerfile template's `layers`) and no known sandbox
//     (running or paused, `Manager.TemplateHashes`) refers to: at start before the daemon is ready, and 2 min after
//     every build (creates that resolved a replaced hash are sandboxes by then); never while a build holds
//     `Manager.Hold` (builds of built-ins, Dockerfile builds). Directories go through `.trash-*` first.
//
//   - **A stream whose sandbox went away ends with a reason** (`internal/proxy/endstream.go`). Connect streaming
//     responses (`application/connect+json`) are passed through a reader that tracks envelope boundaries; when the
//     gone-watch cancels the request between two envelopes, the proxy appends an end-stream envelope with
//     `{"error":{"code":"unavailable","message":<why, e.g. the memory-limit tombstone>}}` and ends the response
//     cleanly instead of cutting the connection.
//
//   - **The suite** (issue 7): `test/gohttp/{security,abuse,apiabuse,faults,faults_pause,faults_template,faults_oom,diskfull}_test.go` (raw HTTP; subtests named
//     `attack/…`, `abuse/…`, `fault/…`), `test/e2e/security.test.mjs` (the E2B SDK), fuzz targets for every parser
//     we own (API requests, list filters and cursors, Basic auth, path resolution, URL signatures, StartRequest,
//     sandbox hosts, Jupyter frames) run by `scripts/fuzz.sh` with the corpus in `testdata/fuzz/`, `bench/soak`
//     (load) and `bench/report` (one table → `docs/RELIABILITY.md`, with the findings list). Each attack asserts
//     it failed *and* that the daemon's `/health` and a witness sandbox are unharmed; fault tests SIGKILL the
//     daemon mid-operation through the restart helpers and then check runsc state, netns, veths, nftables
//     references, cgroups, mounts and sandbox dirs against the API's list.
//
// # Limits
//
// Per-sandbox limits come from the create body (Airlock extension keys, ignored by E2B: `cpuCount`,
// `memoryMB`, `diskSizeMB`, `maxProcesses`, `maxOpenFiles`) or the daemon defaults
// (`--default-cpu-count` 2, `--default-memory-mb` 512, `--default-disk-mb` 10240,
// `--default-max-processes` 256, `--default-max-open-files` 65536), bounded by `--max-cpu-count` 8,
// `--max-memory-mb` 8192, `--max-disk-mb` 51200 and fixed bounds for processes (16..1024) and open
// files (64..1048576); out of range → 400 `{code,message}` (`internal/sandbox/limits.go`). The
// resolved `cpuCount`/`memoryMB`/`diskSizeMB` are stored and shown in list/info.
//
//   - **CPU**: CFS quota of `cpuCount` whole CPUs on the sandbox's host cgroup.
//
//   - **Memory**: a process that runs the sandbox out of memory dies and the sandbox goes on, as
//     under Linux's OOM killer (E2B's behaviour). microVM: the guest kernel's OOM killer does it (the
//     agent is PID 1, which it never picks). gVisor has none, so the agent's **OOM guard**
//     (`internal/envd/oomguard`, on when the runtime sets `AIRLOCK_OOM_GUARD_MB` = `memoryMB`)
//     checks every 20 ms while memory is within reach of the limit (`/proc/meminfo` shows half of it or
//     more in use), while the agent serves a request (either port) and for 5 s after the last one ends
//     (`oomguard.Activity`, wrapped around both handlers in `cmd/airlock-envd`), or for 2 s after a
//     wake-up from the host, and otherwise only every 10 s: each check is a wake-up that
//     gVisor's Sentry serves on the host's CPU, and polling every 20 ms was most of the 5–8 % of a core an
//     idle sandbox used to cost. The wake-ups come from the host (`internal/runtime/gvisor/memwatch.go`,
//     started with the headroom below): the daemon registers cgroup v1 usage thresholds 32 MiB above and
//     below the sandbox's current host memory (`cgroup.event_control` + an eventfd in Go's poller, no
//     thread and no CPU while memory stands still; on cgroup v2, `memory.high` kept 32 MiB above the
//     usage as a tripwire, its crossing notified through `memory.events` and inotify, `memwatch_v2.go`) and, when usage grew past one, wakes the guard with the datagram `airlock-wake oom` to the agent's wake port (SIGUSR2 through `runsc kill <id> USR2` as the fallback;
//     at most once a second per sandbox, inside the guard's 2 s burst) and re-arms around the new usage; a restarted daemon starts the watchers of the sandboxes it finds
//     running (`runsc state`/`runsc list` seeing one without a watcher). The bundle tells the guard with `AIRLOCK_OOM_GUARD_WAKE=SIGUSR2`;
//     without it (another runtime, an older daemon) the guard checks every 20 ms as before. A check that
//     finds less than ¾ of the limit in use does nothing more; above that it adds up the processes'
//     `VmRSS` and, over the limit, SIGKILLs the largest process other than PID 1, the agent and any
//     with `oom_score_adj` -1000, and logs it. The command then ends with `signal: killed`. The host
//     memory cgroup is `memoryMB` + 64 MiB for the sentry and gofer at start (runsc sizes the guest's
//     `free` from it), raised by 768 MiB of guard headroom once the sandbox runs (and again after each
//     restore or boot: `gvisor/memory.go`), so the guard acts before the host does. Memory that no
//     process holds can still reach the host limit; then the host kills the sentry and the whole
//     sandbox stops (the e2e fault test provokes that by lowering the host limit). The
//     manager's watcher (`internal/sandbox/watch.go`, every 2 s, one `runsc list`) finds sandboxes the
//     runtime no longer runs (seen twice in a row and confirmed with `runsc state`, so a transient
//     misreading never removes a healthy sandbox; detection takes 2–4 s), asks the runtime why (`runtime.StopReasoner`; gVisor reads
//     `memory.oom_control` `oom_kill` and `pids.events` `max` from the cgroups before destroying them),
//     releases them and remembers the reason for an hour: `GET /sandboxes/{id}` (and kill, timeout,
//     connect) then answer 404 `sandbox "<id>" was stopped because it exceeded its memory limit (256 MiB)
//     and was removed`; the SDKs see a 404/502 like for any vanished sandbox;
//     `airlock_sandbox_unexpected_stops_total{reason}` counts it.
//
//   - **Processes**: `RLIMIT_NPROC` inside gVisor (per uid: a fork bomb of `user` gets EAGAIN while
//     root, e.g. `commands.run(…, {user: 'root'})`, can still clean up). Kept low by default because
//     each guest task costs up to ~30 host tasks under ptrace and the host's `kernel.pid_max` (32768
//     here) is shared.
//
//   - **Disk**: the writable layer is a sparse ext4 image of `diskSizeMB`; a full disk gives ENOSPC
//     inside and 507 from `/files` (the SDK's `NotEnoughSpaceError`). The image is sparse, so the host
//     only pays for what is written, but the sum of all sandboxes' `diskSizeMB` should fit the data
//     dir's filesystem.
//
//   - **Open files**: `RLIMIT_NOFILE`.
//
// # Sandbox logs (GET /sandboxes/{id}/logs, internal/sandbox/events.go, agentlog.go)
//
// The lifecycle of each sandbox as the daemon saw it. The sandbox manager's logger is wrapped
// (`eventLog.handler`): every record at info level or above that carries a `sandbox` attribute still goes
// to the daemon log at its configured level, and is also kept in that sandbox's list (last 1000 events) —
// so the events are exactly the daemon's own log lines: `sandbox created` (template, slot, guest_ip,
// elapsed), `sandbox timeout changed`, `sandbox network policy changed` (internet, allow_out, deny_out),
// `sandbox paused` / `sandbox timed out; pausing` / `sandbox resumed`, `sandbox forked`, `sandbox timed out`,
// `sandbox killed`, `sandbox stopped on its own` (warn, with the reason: out of memory, agent exited, …), and
// warnings about the sandbox. A removed sandbox keeps its list in memory until 256 later removals (so "why
// did it stop" can be asked after the fact). The events of a live sandbox (running or paused) are also on
// disk and survive a daemon restart ("Logs on disk"); a removed sandbox's are not.
//
//   - `GET /sandboxes/{id}/logs?start=<unix ms>&limit=N` (limit 0..1000, default 1000) → `{logs: [{timestamp,
//     line}], logEntries: [{timestamp, level, message, fields}]}`, oldest first; `line` is `message k=v …`.
//
//   - `GET /v2/sandboxes/{id}/logs?cursor=<unix ms>&limit&direction=forward|backward&level=<minimum>&search=
//     <substring>` → `{logs: [{timestamp, level, message, fields}]}`: forward = at or after cursor, oldest
//     first; backward = at or before cursor (default now), newest first.
//
//   - Both bodies carry `dropped`: how many older events the daemon no longer keeps (beyond the newest 1000).
//
//   - 404 for a sandbox that is neither live nor recently removed; 400 for bad parameters.
//     Process start/exit events (internal/sandbox/agentlog.go): the agent logs `process started` (pid, cmd,
//     user, tag) and `process ended` (pid, status) as JSON lines on its stderr, which runtimes keep on the host
//     (`runtime.AgentLogger`: gVisor's `agent.log`, the microVM's serial `console.log`). For a sandbox that is
//     still here (running or paused) `Logs` reads the last 1 MiB of that file, keeps those two messages, and
//     merges them by time with the daemon's events, marked `source=agent` — they are what the sandbox's own agent
//     reported (a root process in the sandbox could write to the agent's stderr), not something the daemon
//     checked. They go with the sandbox's directory when it is removed. Tests: `internal/sandbox/events_test.go`
//     (capture, levels, bounds), `agentlog_internal_test.go` (parsing with console prefixes and junk, tail,
//     merge), `internal/api/logs_test.go` (shapes, filters, after kill), `test/gohttp/logs_test.go` (a real
//     sandbox created, timeout changed, policy changed, paused, resumed, killed — in that order; a command's
//     start and end with its pid).
package sandbox
