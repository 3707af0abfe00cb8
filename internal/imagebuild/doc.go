// Package imagebuild builds templates from Dockerfiles without a container
// engine. Every RUN executes inside a sandbox of the runtime in use; the
// sandbox's writable layer (the overlay upper directory) is applied onto a
// hard-linked clone of the parent layer, giving a new, complete root
// filesystem stored like any template under <data>/templates/<hash>/rootfs.
// A layer's hash chains the parent's hash, the expanded instruction, the
// build state it depends on (ENV, ARG, USER, WORKDIR, SHELL) and the hashes
// of copied files, so an unchanged prefix of a Dockerfile is served from
// cache. The final template is the last layer plus a Config (environment,
// user, workdir, resources, start and ready commands) recorded as the
// template's spec.
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # Two ways in, one engine: Dockerfiles and templates defined in code
//
// A custom template is built from either a Dockerfile (`airlock template build`, the console,
// `POST /airlock/v1/templates/{name}/build`) or E2B's template build API as the SDK's `Template`
// builder drives it (`Template.build`, `buildInBackground`, `e2b template create`). Both end in the
// same engine, `imagebuild.Builder.Build` (below): the SDK's build spec is translated into a
// Dockerfile plus a build context and handed to `TemplateAdmin.BuildDockerfile`, so RUN steps run in
// sandboxes, layers are cached and `FROM` images are pulled exactly as for Dockerfiles.
//
//   - `POST /v3/templates` (`internal/api/templates_v3.go`): name `name[:tag]` plus `tags` (a bare name
//     means `name:default`), cpu and memory; a row in `template_builds` (SQLite migration 3, status
//     `waiting`) and its id are returned.
//
//   - `GET /templates/{id}/files/{hash}`: `present`, or an upload URL the daemon serves
//     (`PUT /airlock/v1/template-files/{hash}?expires=…&signature=…`: HMAC-SHA256 keyed with the API
//     key over the hash and expiry, valid 1 h and for that hash only; the E2B CLI PUTs with no
//     header, as to a presigned bucket URL, so the signature replaces the API key). The body, a tar of a
//     `copy()` step's files (gzip or not, at most 1 GiB), must read as a tar to the end and match its
//     Content-Length; decompressed it may hold at most 2 GiB and 1,000,000 entries (`copyTar`; past
//     that: 413, the temp file removed). It is stored uncompressed as `<data>/template-files/<hash>.tar`,
//     keyed by the SDK's content hash, via a temp file + rename (partial uploads are removed at start);
//     a set already stored under the hash is never replaced. The hash is not checked against the
//     content (the SDK's hash covers the `COPY src dest` line and directory sizes, which the upload
//     lacks; see DECISIONS). Symlinks in a set are kept as links: the build follows one only while it
//     stays inside the build context (next section).
//
//   - Garbage collection of uploads (`internal/api/filesets.go`, `FileSets`; run by the daemon at
//     ready and hourly, `internal/daemon/gc.go`): a file set's mtime is its last use (its upload, a
//     `present: true` answer to the SDK's check, the start and the end of a build using it). A file set
//     unused for 24 h that no running build pins is removed. A build pins its file sets from its start
//     (checked and pinned in one step under the `FileSets` lock, which GC takes too) to its end. A build
//     still `waiting` is covered by the grace period: the SDK checks (and so touches) its files right
//     before it starts the build; one whose files were collected anyway gets 400 "step n (COPY): the
//     files of … were not uploaded" and the SDK's next attempt uploads them again (its built steps stay
//     in the layer cache). The layers keep the copied files, so a collected upload never affects a
//     built template.
//
//   - `POST /v2/templates/{id}/builds/{build}` (`sdkbuild.go`): the spec becomes one Dockerfile line
//     per instruction: `FROM <fromTemplate|fromImage>` (`e2bdev/base` = Airlock's `base`), then
//     `USER`/`WORKDIR` of E2B's defaults (`user`, `/home/user`) or of the base template, then per step
//     `COPY --chown --chmod [".e2b/files/<hash>/<src>", dest]`, `ENV k="v"` (literal: `$` escaped),
//     `WORKDIR`, `USER`, `RUN ["/bin/sh","-c",cmd]` (with a user: `USER u`, the RUN, `USER` back).
//     `fromImageRegistry` of type `registry` (username, password) is passed to the engine as
//     `imagebuild.Request.RegistryUsername/Password` and used (go-containerregistry basic auth, via the
//     build's context) for the FROM pull only, never logged or stored; `aws`/`gcp` are refused (400)
//     with how to express them as username/password.
//     A step with `force` gets an `ARG AIRLOCK_FORCE_STEP_<n>=<build id>` line first (cache miss from
//     there on); the spec's `force` is `NoCache`. Each line maps back to its SDK step number
//     (1-based, `base` for the FROM part), so errors read `step 2 (RUN exit 3): …` and the status
//     `reason.step` points the SDK at the user's call site. The spec is checked before anything
//     runs (unknown step type, missing upload, bad hash, bad user or env name: 400 naming the step;
//     a build id of another template: 400; started twice: 409). The build runs in the background.
//
//   - `GET /templates/{id}/builds/{build}/status?logsOffset=n`: the log entries after `n` (live from
//     memory while building, from the row after), status and `reason`. `GET …/logs` pages them
//     (`cursor` ms, `limit`, `direction`, `level`). `GET /templates/{id}` (TemplateWithBuilds) lists
//     the template's SDK builds, newest first, at most 100 (`store.TemplateBuildStore.
//     ListTemplateBuilds`, the `template_builds (template_id, created_at)` index), each with its live
//     status, `finishedAt` once ended and the Airlock extensions `tags` and `reason`; a template never
//     built through this API has its one current build there.
//
//   - Tags are template records: `name:default` is the record `name`, `name:tag` the record
//     `"name:tag"`, all pointing at the build's layer hash, so they survive restarts with the
//     templates, `Sandbox.create('name:tag')` and `FROM name:tag` resolve like any name, GC keeps
//     their layers and `airlock template ls` shows a TAGS column. E2B's reads group the records by
//     name (`GET /templates` has one entry per template, see "Templates" above). `POST /templates/tags` records more
//     names for a build, `DELETE /templates/tags` removes them (409 while a sandbox runs from one),
//     `DELETE /templates/{name}` is refused (409) while other tags of the name exist.
//
//   - Restart: the template record is written only when the whole build succeeded, build sandboxes
//     and scratch directories of a killed daemon are removed at start (see "Restart"), and a row still
//     `building` that no goroutine of this process runs is marked `error` ("interrupted") when read.
//
// Measured figures: bench/README.md, "Two ways in, one engine: Dockerfiles and templates defined in code".
//
// # Dockerfile templates (internal/dockerfile, internal/imagebuild)
//
// `airlock template build [-f Dockerfile] [--name N] [--cpu C] [--memory-mb M] [--start-cmd CMD]
// [--ready-cmd CMD] [--no-network] [--no-cache] [--build-arg K=V] [--json] [context-dir]` tars the
// context and POSTs it (`Content-Type: application/x-tar`, options as query parameters
// `dockerfile, cpuCount, memoryMB, startCmd, readyCmd, noNetwork, noCache, buildArg`) to
// `POST /airlock/v1/templates/{name}/build`, which streams NDJSON: `{"phase":"step"|"output"|
// "cached"|"done"|"info","message","done":<step>,"total"}` lines, then `{"done":true,"template":{…}}`
// or `{"error":"Dockerfile line N (…): …","code":400}` (`code`: the status the error stands for, 4xx
// for a refused input, 500 for a daemon failure; the stream itself started with 200). `GET /airlock/v1/templates/{name}` adds the template's
// `config`; `DELETE /airlock/v1/templates/{name}` (and E2B's `DELETE /templates/{id}`) answers 409
// while a sandbox uses it. The daemon extracts the tar through an `os.Root` (no `..` names, only
// files/dirs/symlinks; a link is created with whatever target it names, as a link is data) into
// `templates/.tmp-context-*`.
//
//   - **Parsing.** BuildKit's parser and `instructions` packages (module weight: `moby/buildkit`
//     parser/instructions/shell/linter, `docker-image-spec`, `go-digest`, `pkg/errors`; no daemon
//     code). Before `instructions.Parse`, every AST node is checked against the supported set
//     (FROM, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER, LABEL, SHELL, CMD, ENTRYPOINT); others, a second
//     FROM, heredocs, `RUN --mount/--network`, `COPY --from/--link`, `ADD <url>` fail with the line
//     number. Variables are expanded with BuildKit's `shell.Lex` against ARG+ENV.
//
//   - **Layers are full root filesystems.** Each filesystem step (RUN, COPY/ADD, a WORKDIR that must be
//     created) makes a new directory `templates/<layer-hash>/rootfs`: `cp -al` of the parent (hard links,
//     ~0.5 s for `base`), then the change is applied. Files of a layer are never modified in place, only
//     replaced (unlink + create), so sharing inodes with the parent is safe. The template is the last
//     layer; the runtime keeps using a single overlay lower (no multi-lower change). Cost: every layer
//     repeats the directory inodes (~5 MiB on top of `base`); files are shared.
//
//   - **RUN executes inside a sandbox** of the runtime in use: `sandbox.Manager.Create` with
//     `CreateRequest.RootFS` = the parent layer (internet on unless `--no-network`), the command via the
//     agent's Process service (`Manager.Exec`) as the instruction's USER in its WORKDIR with ENV+ARG,
//     output streamed into the build log; then `airlock-envd -sync` inside (sync(2) by the agent: images without sync(1) work), and the step's writes as an overlay-style
//     upper directory (`imagebuild.LayerSource`: gVisor's own upper directory `gvisor.UpperDir`, or
//     for microVMs one made from the VM's disk, see the next section) are applied onto the clone: 0/0 character devices (whiteouts) delete, directories
//     with `trusted.overlay.opaque=y` replace, everything else is copied with owner, mode, times and
//     xattrs (after chown, so file capabilities survive). Files the runtime/agent write into every sandbox
//     (`/etc/hostname`, `/etc/hosts`, `/etc/resolv.conf`, the agent bind-mount target,
//     `/var/lib/airlock-envd`) never enter a layer. An upper with `redirect`/`metacopy` xattrs is refused
//     (the host mounts overlays without them). A non-zero exit fails the build with the line and the last
//     30 output lines. The compat preload library and the sandbox user come from `base`.
//
//   - **COPY/ADD** run on the host, writing through an `os.Root` on the new layer (symlinks in the image
//     cannot redirect writes outside it); `--chown` names are resolved in the image's `/etc/passwd` and
//     `/etc/group`. `.dockerignore` uses `moby/patternmatcher`. ADD does not fetch URLs or unpack archives.
//
//   - **Reading the context** (`context.go`, BuildKit's semantics): every read goes through an
//     `os.Root` on the context. A source path is resolved element by element (`buildContext.resolve`):
//     a symlink is followed only while it stays inside the context; an absolute target, or `..`
//     climbing above the context root (directly or at the end of a chain of links), is refused with a
//     400 naming the source and the link (`COPY d/hostname`: `symlink d points to /etc, outside the
//     build context`); 40 links at most. A source that is itself a link, and links met while walking
//     a copied directory (`fs.WalkDir` on `root.FS()`), are copied as links, whatever their target
//     (copying a link reads nothing; the SDK's `copy()` sends links as links unless `resolveSymlinks`). Wildcards are matched per element by listing resolved directories through
//     the root (`buildContext.glob`), never `filepath.Glob` on host paths; `.dockerignore` is resolved
//     the same way. Files are opened through the root with `O_NOFOLLOW` and must be regular. The SDK's
//     file sets reach this code as part of the generated build context, so the same rules hold there.
//     Tests: `context_linux_test.go` (`TestResolveCopySymlinks`, `FuzzResolve`: a resolved path stays
//     inside the context by the kernel's own resolution), `TestReviewBuild` (attacks through the API),
//     `test/e2e/templates-review.test.mjs` (the official SDK's `copy()` of links).
//
//   - **Cache.** A chain key starts from the FROM template's hash and absorbs every instruction: config
//     instructions (ENV, ARG, USER, SHELL, WORKDIR) change the key, filesystem steps name their layer
//     `sha256(key, instruction, argv/env/user/cwd | dest/chown/chmod/hash of the copied files' paths,
//     modes and contents)`. A layer directory that exists is a hit (`[n/N] CACHED`); a changed line
//     changes its key and every key after it, so a rebuild reruns from that line. Layers are published
//     with an atomic rename; the template record is written only after the last step, so a failing build
//     leaves no template (finished layers stay as cache). `template rm` removes the record only.
//
//   - **Template config** (`imagebuild.Config`, stored as the template record's spec JSON): env, user,
//     workdir, labels, cpu/memory, start command (`--start-cmd`, else ENTRYPOINT/CMD, exec forms
//     shell-quoted), ready command, layer list. The sandbox adapter turns it into
//     `sandbox.TemplateConfig`: `/init` gets the env, default user and workdir; after `/init` the manager
//     starts the start command in the background (`/bin/sh -c`, as the user, in the workdir) and polls
//     the ready command every 200 ms (60 s limit). Create returns only once it exits 0; otherwise the
//     sandbox is destroyed and the client gets a 502 with the last output.
//
//   - **Not yet:** multi-stage
//     builds, ADD of URLs/archives, layer garbage collection
//     (`template rm` keeps the layers as cache). Build sandboxes are ordinary sandboxes (metadata
//     `airlock.build=<name>`) and show up in sandbox lists while a step runs.
//
// Measured figures: bench/README.md, "Dockerfile templates (internal/dockerfile, internal/imagebuild)".
//
// # Dockerfile builds on the microVM runtime (internal/imagebuild/disk_linux.go, diskdiff.go, upper_linux.go; internal/ext4; internal/runtime/microvm/export.go)
//
// A microVM's writes are in its qcow2 overlay, not in a host directory, so the builder's
// `LayerSource` for a VM runtime (`imagebuild.DiskSource`, chosen in `serve.go` when the runtime
// implements `imagebuild.DiskExporter`) turns the VM's disk into the upper directory that
// `applyUpper` already reads. The build sandbox is created through the sandbox manager exactly as
// for gVisor (netns, egress, `--no-network`); the parent layer becomes its base image like any
// template (`mkfs.ext4 -d`, cached by path; layer directories are immutable).
//
//  1. After the RUN command and `sync`, `microvm.ExportRootDisk` sends QMP `stop` (vCPUs halt, QEMU
//     drains and flushes its block devices) and runs `qemu-img convert -U -O raw -S 4k` of the
//     overlay to `<sandbox dir>/layer-*/disk.raw`. The VMM is untrusted, so is its qcow2: the header
//     is checked for an external data file (refused: it would name a host path), the backing file is
//     given explicitly in a `json:` spec (the header's backing name is ignored), every file is an
//     inherited descriptor (`/dev/fd/N`), and qemu-img runs as the VMM's uid 65534 through
//     `setpriv` (no capabilities, no new privileges).
//
//  2. The guest never unmounted its ext4: `e2fsck -f -y` (user space, same unprivileged user)
//     replays the journal and repairs what it can.
//
//  3. **The host kernel never mounts a guest-written disk.** `DiskSource` re-executes the daemon's own
//     binary (`/proc/self/fd/5`, argument `airlock-internal-diff-disks`, caught first thing in `main`
//     by `imagebuild.DiffDisksChild`) through the runtime's `UnprivilegedCommand` (`setpriv` to uid/gid
//     65534, no capabilities, no groups, `no_new_privs`), in new network (empty: no loopback services),
//     IPC and UTS namespaces, with an empty environment and exactly three
//     inherited descriptors: the base image (3), the exported disk (4) and the binary (5). The child
//     refuses to run as root, sets `RLIMIT_FSIZE` 0, `RLIMIT_NOFILE` 16, `RLIMIT_AS` 4 GiB and a 1 GiB
//     Go memory limit, opens both images with `internal/ext4` (a read-only ext4 reader in pure Go:
//     extents, htree directories read linearly, fast and slow symlinks, in-inode and block xattrs with
//     POSIX ACLs in getxattr form, owners, modes, ns times, devices, FIFOs; every offset and count is
//     checked against the image and fixed limits; unsupported incompat features such as inline_data,
//     meta_bg, encrypt, casefold, ea_inode, a journal needing recovery, and block-mapped files are
//     refused by name) and writes the difference (`diffImages`) to stdout as a PAX tar: entries that
//     are new or differ (file type, permission bits, owner, size, inode number, mtime and ctime to the
//     ns, device numbers, symlink target, xattrs), 0/0 character devices for deletions (one for a
//     deleted directory), the directories leading to them with the new tree's metadata, every path of a
//     hard-linked inode of which one path changed (tar links to the first), sockets left out. A
//     directory inode reached twice (a loop) is an error. New device nodes are refused outside `/dev`
//     and as 0/0 (which would read as a whiteout); the images' `/lost+found` is never part of a layer;
//     `trusted.overlay.*` is never written. The daemon unpacks the stream with `extractUpper`, which
//     checks every entry again (clean relative names whose parent is a directory of the stream, each
//     name once, hard links only to earlier non-directories, the device rule, no GNU sparse, no
//     `trusted.overlay.*`) and sets owner, mode, xattrs and times, directories last. A corrupt or
//     refused image ends the build with a 400 (`the step left a root file system that cannot be read:
//     …`, naming the inode or feature); the child's exit code 3 marks such user errors.
//
//  4. `applyUpper` applies it onto the hard-linked clone of the parent, as for gVisor (runtime files
//     such as `/etc/hostname` and the agent's bind-mount target stay out); the work dir is removed,
//     then the sandbox. The microVM runtime's `Destroy` still detaches any mount left below a sandbox
//     dir (from a daemon of an older version that died mid-step) before removing it.
//
// *Why compare two images and not the disk with the host's layer tree:* `mkfs.ext4 -d` (e2fsprogs
// 1.47) keeps whole seconds only (a file with mtime `…:00.123456789` reads `…:00.000000000` in the
// image, ctime likewise), so an exact comparison with the host tree would call every file changed,
// and a rounded one could miss a same-size rewrite within the second. The base image and the VM's
// disk are one file system before and after: an untouched file keeps its inode number and ctime,
// which only the kernel sets (a same-size rewrite with its mtime put back is caught by ctime alone;
// the root test covers it). Unchanged files stay hard links to the parent layer.
//
// *Trust:* the guest controls every byte of its disk, so the image is parsed only in user space, by
// an unprivileged, capability-less child whose only output is a tar stream the daemon checks again:
// a parser bug can neither reach the host kernel's ext4 driver nor touch the daemon's memory as root.
// The base image is ours, but it goes through the same reader (one code path). The reader checks no
// checksums and replays no journal (e2fsck did); its tests compare it with the kernel's view of the
// same images (`internal/ext4`).
//
// n=5 each. Where the microVM's time goes (daemon debug log, same run): boot of the build VM to
// agent ready 2.3–5.1 s; reading the layer 0.69–1.39 s (stop + `qemu-img convert` + `e2fsck`
// 0.24–0.90 s, then two mounts and the diff of `base`'s ~30 k entries ~0.45 s; since M6 the jailed
// user-space reader replaces the mounts and the diff: 0.07–0.24 s after the export, DECISIONS "Security
// review (issue 23): microVM build disks (M6)"); `mkfs.ext4 -d` of a
// parent layer 0.9–2.3 s (436 MB), once per layer (the image is cached by the layer's path, so
// `--no-cache` rebuilds of the same WORKDIR layer reuse it: the p99 is the first build).
//
// Tests: `internal/ext4/ext4_linux_test.go` (root: images from `mkfs.ext4 -d`, filled through the
// kernel with every kind of entry — 600-entry directory indexed by `e2fsck -D`, 40-run sparse file,
// fallocated range, fast and slow symlinks, hard link, char/block devices, FIFO, setuid file with a
// large uid, user/trusted/security xattrs, an xattr block, a POSIX ACL, ns times before 1970 and after
// 2038 — in three layouts (default, 128-byte inodes, 1 KiB blocks without 64bit): the reader sees
// exactly what the kernel shows of the same image mounted, field by field);
// `internal/imagebuild/review_disk_linux_test.go` `TestReviewDisk` (root: `DiskSource` with the
// jailed child on crafted images — truncated, no superblock, inline_data/encrypt feature flags,
// an extent past the end, a directory loop, an unknown file type, ~50 byte flips in the metadata —
// each refused with a user error or read, never a crash, and no loop device or ext4 mount appears
// while it runs); `test/e2e/microvm-review-m6.test.mjs` (a RUN step that sets inline_data in its own
// superblock through the raw block device, and an ordinary one: no loop device or mount on the host
// during the build; a clear refusal or the right layer);
// `internal/imagebuild/diff_linux_test.go` (root: two ext4 images from `mkfs.ext4 -d`, one
// changed through a loop mount — new file and dirs, changed content, same-size rewrite with its mtime
// put back, deleted file, deleted directory tree, directory replaced by a file, mode-only change,
// owner change, xattr, new symlink, new hard link to an unchanged file; the upper holds exactly the
// changes and whiteouts, applied onto the source tree it equals the changed image; unchanged files
// keep their inode and ns mtime; a device node is refused); `internal/runtime/microvm/export_test.go`
// (a qcow2 naming an external data file, and a non-qcow2, are refused; root: a booted VM writes a
// file and deletes one, `ExportRootDisk` gives an image, owned by uid 65534, that shows both and
// names the base image; root: mounts below a dir, nested and with a space in the name, are
// detached, others kept); `test/e2e/microvm.test.mjs` "Dockerfile
// builds on the microVM runtime" (the CLI builds FROM base + ENV + WORKDIR + RUN on the microVM
// daemon; a sandbox from the template sees the workdir, env, files, symlink, hard link, owner, modes,
// the changed `/etc/motd`, that the deleted file and directory are gone and their siblings stay; the
// rebuild is CACHED).
//
// Not done: garbage collection of the base images made for
// intermediate layers (`<data>/microvm/images`, one per parent layer of a RUN step, like any
// template's image); a qcow2 snapshot chain instead of a fresh `mkfs.ext4 -d` per step.
//
// Measured figures: bench/README.md, "Dockerfile builds on the microVM runtime (internal/imagebuild/disk_linux.go, diskdiff.go, upper_linux.go; internal/ext4; internal/runtime/microvm/export.go)".
//
// # FROM OCI images (internal/imagebuild/oci_linux.go, ociapply_linux.go)
//
// A `FROM` that names no template and looks like an image reference (contains `/`, `:` or `@`, or
// uses a scheme) is resolved with go-containerregistry for linux/amd64:
//
//   - `registry/repo[:tag|@sha256:…]`: `remote.Image` with the platform option (indexes are resolved to
//     the amd64 manifest), credentials only from the request (`fromImageRegistry`). The transport
//     (`registry.go`) is the node's own network, so it applies what sandboxes are denied: its
//     `DialContext` resolves the host once, checks every address (`network.Config.Denies`: the
//     always-blocked ranges, the sandbox pool, `--deny-out` less `--deny-out-except`; IPv6 that is not
//     global unicast or embeds IPv4; plus loopback, link-local and the host's own interface addresses)
//     and connects to the checked address, so DNS rebinding cannot redirect it. Redirects and token
//     realms go through the same dialer; at most 3 redirects. `--registry-allow` (IP, CIDR or ip:port)
//     opens addresses for registries (a loopback or internal mirror). Plain HTTP only to loopback hosts
//     (which then need allowlisting). Errors never carry a response body: a registry answer becomes
//     `the registry answered 403 Forbidden (DENIED)` (status and known error codes only; `pullErr`),
//     anything else is cut to one 300-byte line. With `HTTPS_PROXY` set, the proxy is what is dialed
//     (allowlist it if private) and the proxy decides where it connects.
//
//   - `oci-layout:///abs/dir[:tag]` or `oci-layout:///abs/dir@sha256:…`: an OCI image layout directory on
//     the daemon host; `:tag` matches the `org.opencontainers.image.ref.name` annotation, no tag needs a
//     single (linux/amd64) entry; nested indexes are descended by platform.
//
//   - `docker-archive:///abs/file.tar`: a `docker save` tarball (single image) on the daemon host.
//     Both local forms must lie inside `--image-dir` after symlinks are resolved (default: none, so
//     they are refused with a 400 saying how to turn them on).
//
//   - An image may pull and unpack at most `--max-image-mb` (default 16 GiB): the compressed sizes the
//     manifest declares are checked before any layer is fetched, the uncompressed bytes while applying
//     (413, the half-made layer removed).
//
// The image's layers are applied in order into a fresh `templates/<hash>/rootfs`, where
// `hash = sha256("oci-image", manifest digest, fixup version, compat library hash)`, so a second
// build of the same digest reuses it (`image …: cached` in the log; the manifest is still fetched to
// learn the digest). The applier (`layerApplier`) refuses absolute names, `..` components, hard links
// leaving the root and character/block devices outside `/dev`; parent directories are resolved with
// chroot semantics (an absolute or `../../..` symlink from an earlier entry stays inside the root);
// `.wh.<name>` deletes, `.wh..wh..opq` removes everything in the directory that the same layer did not
// write; owners, modes (after chown, so setuid bits survive), `SCHILY.xattr.*` (not `trusted.*`),
// hard links and times (directory times restored at the end) are kept. Then fixups make the agent
// work: `/usr/local/bin`, `/tmp` (1777), `/root`, `/home/user`, `root` and `user` (uid/gid 1000,
// home `/home/user`) appended to `/etc/passwd` and `/etc/group` when missing (the agent resolves users
// there). Whether the image uses glibc (`/lib64/ld-linux-x86-64.so.2` or
// `/lib/x86_64-linux-gnu/libc.so.6`) is recorded in the layer's spec; nothing is preloaded any more.
// The image config seeds the build state the way Docker does: `Env`, `WorkingDir`, `User`,
// `Cmd`/`Entrypoint` (exec form, so the start command unless `--start-cmd`). The normal layer engine
// continues from there (the image layer is `Layers[0]` of the template config).
//
// Tests: `internal/imagebuild/ociapply_linux_test.go` (whiteouts, opaque dirs, metadata, refusals,
// symlink escape, registry/layout/archive sources, insecure-registry refusal, fixups with and without
// glibc); `registry_linux_test.go` (denied dials, token realm and redirects to denied addresses,
// redirect cap, no body echoed, `--image-dir` confinement); `test/gohttp/review_build_test.go`
// (`TestReviewBuild`: the same attacks and the context-symlink ones through a running daemon); `test/gohttp/ociimage_test.go` (an image built in the test from the host's static busybox
// with a whiteout layer, pushed to go-containerregistry's in-process registry on 127.0.0.1, FROM +
// RUN + COPY, a sandbox runs `/bin/sh -c` as root and user, the rebuild is fully cached; a missing
// image; a glibc image from the host's bash in an OCI layout gets the compat preload and runs the
// SDK's `/bin/bash -l -c`). Not done: registry credentials, `--platform`, layer-blob cache shared
// between digests, garbage collection of unpacked images.
package imagebuild
