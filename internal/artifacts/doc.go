// Package artifacts stores Airlock's large, immutable artifacts — template
// root filesystems and layers, paused-sandbox and named-snapshot images — in
// a backend that other hosts can reach: a local directory (the single-host
// default) or any S3-compatible object store.
//
// Every object records the SHA-256 of its bytes. Content-addressed keys name
// that digest (BlobKey for a file, TreeKey for a directory packed as
// tar+zstd, see internal/artifacts/tree), so an object under such a key never changes. Put
// verifies the digest while it streams and leaves nothing under the key on a
// mismatch; Get and GetDir fetch a content-addressed object into a local
// cache directory, check the digest, and rename into place (a tree is
// checked before it is unpacked), so the cache only ever holds verified
// content. Other keys (refs: small manifests under rewritable names) are
// read only with GetRef and the digest their writer recorded somewhere the
// reader trusts (a database row): the digest an object is stored with is
// its writer's word, and anyone who can write the bucket can write it. A backend that cannot be reached answers an *UnavailableError
// (errors.Is(err, ErrUnavailable)), so a caller — a pause — can fail clearly
// and leave the sandbox as it was.
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # Artifacts (internal/artifacts, airlock serve --artifacts)
//
// The store that lets another host use what one host made (issue 17): template root filesystems and
// layers, paused-sandbox images and named snapshots. Two backends behind one `Backend` interface: a
// local directory (the single-host case) and any S3-compatible object store (`github.com/minio/minio-go/v7`,
// see DECISIONS). **Status:** the package, the flag and its tests exist; `airlock serve --artifacts …`
// opens and checks the store at start (below); templates go through it (see "Templates in the store"
// below); on cluster nodes paused sandboxes and named snapshots too ("Moving sandboxes between nodes"); the api
// tier collects what no row needs ("Collection" below). Without the flag nothing changes: everything stays in
// `--data-dir` and no cache directory is made.
//
// **The flag.** `--artifacts s3://bucket[/prefix]` takes the endpoint from `AIRLOCK_S3_ENDPOINT`
// (`host[:port]`, meaning HTTPS, or `http(s)://host[:port]`; unset = AWS S3), credentials from
// `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` (required; never in the URL: a URL with `user:pass@` is
// refused) and the region from `AWS_REGION` (default `us-east-1`); the bucket must follow S3's naming
// rules and the prefix is checked like a key. `--artifacts /dir` (or `file:///dir`) is a local store.
// At start (`internal/daemon/artifacts.go`, at most 30 s) the daemon checks that the bucket exists and
// that an object can be written and removed (`check-<random>` under the prefix); any failure stops the
// start with an error naming `--artifacts` (an unreachable store says `unreachable`; wrong credentials
// show S3's error).
//
// **Layout** under the bucket and prefix, or under the directory:
//
//	blobs/sha256/<hex>      a file (e.g. a sparse disk.img, a memory image), named by the SHA-256 of its bytes
//	trees/sha256/<hex>      a directory packed as tar+zstd (below), named by the SHA-256 of the packed bytes
//	<other keys>            refs: names that may be rewritten (templates/<recipe hash>, snapshots/<id>,
//	                        paused/<id>/<nonce>): each a small manifest naming blobs and trees; the digest a
//	                        reader checks is the one its writer recorded in a database row, not the store's
//	check-<random>          the start-up check's object, removed at once
//
// Keys are relative slash paths of `[A-Za-z0-9._-]` segments, none starting with `.` (those names are the
// backends' own), at most 512 bytes. Every object records the SHA-256 of its bytes (anyone who can write
// the bucket can rewrite it too, so it only fails early: it decides nothing): S3 user metadata
// `x-amz-meta-sha256`; the local backend `<dir>/.sha256/<key>` (written before the object is renamed
// into place; partial writes in `<dir>/.tmp/` are removed when it is opened). The mapping of
// today's data dir: a template's `templates/<hash>/rootfs/` → a tree, named by `templates/<hash>` (built, see
// below); a named snapshot's directory (`checkpoint/`, `disk.img`, `manifest.json`) → a tree or a tree plus the
// layer as a blob; a paused sandbox's `checkpoint/` and its layer the same way under `paused/<id>`. An image
// still only restores under the runsc build that saved it (see "Named snapshots": `runtime.ImageBuilder`).
//
// **Images** (`Images`, images.go: paused sandboxes and named snapshots). The manifest under the key is
// version 1, `{"version":1,"tree":…}`, one tree of the whole directory; or, when the directory holds
// large files (regular, at least half allocated, no xattrs, no second path inside the image, ≥ 1 MiB: gVisor's
// `checkpoint/pages.img`, 100+ MB for an interpreter), version 2 (issue 24): the tree of the rest plus `"files":[{name, blob, size, mode,
// mtimeNs}]`, each file a blob of its own, uncompressed. A fetch downloads the tree and the blobs in
// parallel (each download reads its next 1 MiB chunk while the last is written and hashed:
// `copyPipelined`); a blob is hashed while it is written to a temporary file of the cache and renamed into the
// image directory only once its digest matched (nothing unverified is ever used; a mismatch removes the
// download, drops the corrupted blob from the store and leaves no `dst`). The resume path so no longer
// decodes and copies the memory image; the upload, in the background, no longer compresses it. Readers
// read both versions (images already in a store stay restorable); a node of an older version refuses a
// version 2 manifest by its version. `Delete` and the collection (`internal/artifactgc`) count the blobs
// as the image's.
//
// **Put** streams and verifies: the caller gives the digest (`PutFile` hashes the file first; `PutDir` packs
// into a temporary file in the cache while hashing, then uploads it), a content-addressed key must name that
// digest, and the bytes are hashed on the way. On S3 an object up to the part size (16 MiB) goes up in one PUT
// only after the whole body was read and matched; a larger one, or one of unknown length, goes up as a
// multipart upload, one part in flight (at most 10,000 parts: the part size grows for objects over 160 GiB), and
// the read that would end the stream fails when the digest differs, so the client aborts the upload instead of
// completing it while no part is in flight. Either way a mismatch is `ErrDigestMismatch` and nothing appears
// under the key (an object that was there stays). An upload cut by an unreachable store cannot be aborted: its
// parts stay on the server until a bucket lifecycle rule (`AbortIncompleteMultipartUpload`) removes them; set one. `PutFile` and `PutDir` skip the upload when the key already holds the digest.
//
// **Get and the cache.** `Get(key)` returns the path of a verified copy of a content-addressed object,
// `GetDir(key)` the path of the unpacked tree, `GetRef(key, digest)` the path of a copy of a ref verified
// against the digest the caller gives (from its row; `Get` and `GetDir` refuse a ref key with
// `ErrInvalidKey`: its digest would be the store's word), all in `--data-dir/artifacts-cache/`:
//
//	sha256/<hex>    a file, read-only
//	trees/<hex>/    an unpacked tree
//	.tmp-*          downloads, unpacks and packs in progress (removed when the store is opened)
//
// The download streams through SHA-256 into a temporary file; only a match is renamed into place. A tree is
// downloaded the same way and checked **before** it is unpacked (from that file into a temporary directory,
// then renamed): neither zstd, the tar reader, `Unpack` (as root) nor anything that later reads the files (a
// runtime's memory state, a root filesystem) sees a byte that was not verified (security review M4; the
// pack file costs one more write of the packed size on the data disk, removed at once; `go run
// ./bench/artifacts -mib 128`, shared 2-core VM under other load, 2026-11-28: get tree 1.48 s local / 0.81 s
// S3 against 1.85 s / 3.01 s for the streaming unpack of before, minutes apart: no cost visible in the noise), so a cache name only ever holds verified content and a
// failure or a crash leaves no half-written entry. A content-addressed object (`blobs/…`, `trees/…`) whose bytes
// or recorded digest do not match its name is deleted from the backend when a Get finds it (the error and a
// warning say so): `PutFile`/`PutDir` trust a key that records the right digest, so left there it would never
// be uploaded again; deleted, the next put of that content replaces it. A content-addressed key that is cached is served without
// asking the backend (a node keeps starting templates it holds while S3 is down); another key is looked up
// (`Stat`) for its current digest, then served from the cache if that digest is there. Concurrent Gets of one
// digest share one download (`once`: later callers wait for the first one's result); a caller that gives up
// leaves the download to the others, and it is cancelled when the last one leaves. Nothing evicts cache
// entries yet (left for when consumers exist: they know what is in use). A ref is served from the cache when
// the digest given is there, else downloaded and checked against it.
//
// **Trees** (`internal/artifacts/tree`, `Pack`/`Unpack`): a PAX tar stream compressed with zstd
// (`github.com/klauspost/compress/zstd`, default level), entries in lexical order with no access/change times and no user or group names, so one
// tree packs to the same bytes and key (tested). Kept: regular files, directories (empty ones too), symlinks
// (dangling ones too), hard links (later names of an inode are tar links to the first), device nodes and FIFOs
// (but see what `Unpack` refuses to make, below),
// permission bits with setuid/setgid/sticky, numeric owners (restored when unpacking as root), modification
// times to the nanosecond, and extended attributes of every namespace readable here (`SCHILY.xattr.*` records;
// set after the owner, so `security.capability` survives the chown; directories get their mode and times after
// their contents, deepest first). Sparse files (fewer blocks than their size) keep their holes: the data
// segments come from `SEEK_DATA`/`SEEK_HOLE`, the entry has the PAX record `AIRLOCK.sparse=<size>` and its data
// is a segment map (uvarints) followed by the segments; unpacking writes each segment at its offset and sets the
// size. A 64 MiB file with 12 KiB of data packs and comes back sparse (tested: under 1 MiB stored, under 1 MiB
// allocated after the round trip). Other
// tar readers see such an entry as the map and the data, not the file. Sockets are skipped. `Unpack` only
// accepts clean relative names whose parent is a directory the same stream made (never a symlink, so no entry
// can be written through one), hard links to files it extracted before, and no GNU sparse entries (Go's tar
// reader expands them: a few bytes could claim a terabyte of zeros; found while writing `FuzzUnpack`); its own
// sparse entries are bounded the same way: at most 1 TiB (`AIRLOCK.sparse` above is refused, not made as a
// huge sparse file) and 2^24 segments (found in review). The refusals are tested by their messages, and that
// nothing was written beside the target. Since the review's M4, `Unpack` also drops, whatever the archive
// says: character and block devices other than 0/0 (an overlay whiteout, which a gVisor sandbox's saved
// layer holds; a root filesystem's `/dev` is the runtime's: gVisor's own, the guest's devtmpfs), and
// extended attributes other than `user.*`, `system.posix_acl_*`, `security.capability` (file capabilities
// of rootfs binaries such as `ping`, acted on only by the sandbox's kernel) and `trusted.overlay.opaque`
// (an opaque directory of a saved overlay upper layer). Dropped are, e.g., `/dev/mem`, a disk's block
// device, `trusted.overlay.redirect`/`metacopy` (which the host's overlayfs would follow when it mounts
// the layer), SELinux labels and IMA/EVM. `Pack` keeps everything; the decision is the unpacker's. A
// tree whose bytes do not match its digest never reaches the unpacker: `GetDir` reports
// `ErrDigestMismatch` and removes it like `Get` does (see "Get and the cache").
//
// **Errors.** `ErrNotFound`, `ErrDigestMismatch`, `ErrInvalidKey`, and `ErrUnavailable` inside an
// `*UnavailableError{Store, Op, Key, Err}`: network errors (refused, reset, DNS, TLS), timeouts (dial 5 s,
// response headers 2 min) and S3 answers 5xx, 408 and 429, after 3 tries (the client's default is 10, with a
// growing wait between them: too long before a pause can report). A local store whose directory is gone (an unmounted share)
// answers the same. Other S3 answers (403 wrong credentials, a missing bucket) are ordinary errors: retrying
// does not help. A pause or snapshot that uploads will test `errors.Is(err, artifacts.ErrUnavailable)` to fail
// clearly and leave the sandbox running.
//
// **Templates in the store** (`internal/template/artifacts.go`; `template.Manager.SetArtifacts`, which the
// daemon calls with the `--artifacts` store; nil keeps today's behaviour exactly). Two objects per template
// (a built-in recipe's build or the last layer of a Dockerfile/SDK template, named by its hash as in the data dir):
//
//	trees/sha256/<hex>   templates/<hash>/rootfs/ packed as a tree
//	templates/<hash>     manifest: {"version":1,"hash":"<hash>","rootfs":"sha256:<hex>","packedBytes":n,
//	                     "meta":{…the template's meta.json…}}
//
// The manifest's digest is the template row's `artifact_digest` (`store.Template.ArtifactDigest`, a column
// of `templates` in both stores), written by the node that pushed it; the manifest itself is kept beside
// the template's files (`templates/<hash>/manifest.json`) on every node that pushed or pulled it.
//
//   - **Push, synchronous, before the record.** `record` (a recipe build, or a recipe's build found on disk)
//     and `Register` (every Dockerfile and SDK build, every tag) push first, then write the template record:
//     the tree (`PutDir`), then the manifest, then the record with the manifest's digest. A build reports
//     ready only once both are in the store, so a create on another node right after it finds them, and a
//     record other nodes can read never lacks its files. A push that fails fails the build (nothing
//     recorded; the layers stay as local cache). When the store holds the manifest a row of the hash names
//     and its tree, that digest is recorded and nothing uploaded (two nodes that built one recipe keep the
//     row's copy). Otherwise a hash with a local `manifest.json` is not packed again: the store's manifest is
//     compared with it (`Stat`) and uploaded again when it differs or is missing, the tree when the store
//     lacks it (two or three requests), so tags and cached rebuilds cost nothing. `PushMissing`
//     (run by the daemon in the background once ready) pushes the templates recorded before `--artifacts` was
//     given, and writes the digest into rows that lack it or name another (rows from before digests were
//     kept); `Ensure` does the same for a recipe's row. A template present here without `manifest.json`
//     (built before this version) is packed once more on its first push. Only the
//     template's own rootfs is pushed: a layer is a complete root filesystem, so that is all another node needs
//     to run it or build `FROM` it; intermediate layers stay per-node build cache.
//
//   - **Pull, in `Get`.** A recorded template whose directory is missing here (another node built it:
//     records are shared, see `SetShared`) is pulled: the manifest, only if it has the digest the row records
//     (`GetRef`; a rewritten manifest is `ErrDigestMismatch`, a row without a digest is not pulled:
//     `ErrNotFound`) and its `hash` and meta.json name the template, then `GetDir` of the tree (checked
//     before it is unpacked into the store's cache), then the
//     unpacked tree is **moved** out of the cache (`Store.MoveDir`: a rename, never while that tree is being
//     downloaded) to `templates/.tmp-*/rootfs`, meta.json written beside it, and the directory renamed to
//     `templates/<hash>` as local builds publish. Moving rather than linking or copying: instant, no second
//     copy on disk, and template GC frees the space (pulled templates are ordinary template directories); the
//     cost is a second download if a collected template is needed again. A cache on another file system gets
//     a copy (`cp -a`). `OnPull` tells a node to heartbeat the templates it now holds. Concurrent Gets of
//     one hash share one pull (cancelled when every caller has left);
//     `Ensure` of a built-in recipe pulls the recipe's hash before building it (a new node is ready in
//     seconds instead of running mmdebstrap) when a row of that hash names its digest; with no such row the
//     store's manifest is not trusted and the node builds. Failures say what failed: a store without the manifest or
//     tree is `ErrNotFound` ("not on this node, nor in the artifact store (…)"; on a single host the stale
//     record is dropped as before), an unreachable store is `ErrUnavailable` (a create answers 503 with it),
//     a corrupted tree `ErrDigestMismatch` (the object is removed; the builder's next record of the template,
//     or `PushMissing` at its next start, pushes it again); the record stays in all three cases.
//
//   - **Not yet:** `List` shows the templates present on this node only.
//
// **Collection** (`internal/artifactgc`; run by the api tier, `--artifact-gc-interval`, default 1 h, 0 off).
// Nodes delete what they know is unused (a resumed sandbox's image, a deleted snapshot); the rest — template
// manifests and trees, objects whose rows went while the store was unreachable, left-over checks — is
// collected by the api tier. An api instance with `--artifacts` opens the store at start (the check above
// applies; with `--artifact-gc-interval 0` it does not open it at all) and, 5 minutes after start and then
// every interval, tries `pg_try_advisory_lock(0x4169726c6f636b33)` ("Airlock3") on a pooled connection it
// keeps for the pass: an instance that does not get it skips the pass (another is collecting). The lock
// belongs to the session, so an instance that dies or loses its connection frees it for the others. A pass
// reads the rows of every node (template hashes; id and `extra` of every sandbox row that is not running;
// snapshot ids), lists the store and deletes, each only when modified at least an hour ago (the grace: a
// build pushes its tree, then its manifest, then its row; a pause uploads, then commits the row):
//
//   - `templates/<hash>` whose hash no template row has;
//
//   - `paused/<id>` unless a row `<id>` that is not running (paused, or resuming: a resume claims the row
//     before it fetches the image) names it as `extra.image` (an `extra` that cannot be parsed keeps it);
//
//   - `snapshots/<id>` without a snapshot row; `check-*` (a start-up check cut short);
//
//   - then every `trees/sha256/…` and `blobs/sha256/…` that no remaining manifest names (a template's
//     `rootfs`, an image's `tree`). The manifests are listed again just before, and new or changed ones read,
//     so a manifest written during the pass naming a tree already in the store (`PutDir` does not upload it
//     again, so its date is old) keeps it; a writer that reuses an object in the moments between that
//     listing and the deletes can still lose it (the builder's next record, or `PushMissing`, pushes again).
//
// Keys of any other form are left alone. A remaining manifest that cannot be read as one (not JSON,
// another version, no valid digest, bytes not matching the recorded digest), or any key of an unknown form
// (a newer version's object may name trees), means some tree is not known: no tree or blob is deleted in
// that pass, and a warning says why. Deletes are best effort: a failure is logged (warn) and counted, and a
// manifest that stays keeps its tree; a failure to read (the database, a listing, a manifest) ends the pass
// with a warning. Each pass logs one info line, `artifact gc pass deleted=N freed_bytes=B
// report.templates.kept=… report.trees.deleted=… report.duration=…` (per kind: `kept`, `deleted`,
// `freed_bytes`, `failed`; kinds without objects omitted; `report.trees_held=<reason>` when trees were
// kept back), or `artifact gc pass skipped: another instance holds the lock`. Each instance keeps its
// own schedule, so N api instances make up to N passes per interval, never two at once. Tests: the rules
// against both backends with a fake database and clock (`internal/artifactgc`: referenced, unreferenced,
// young, shared trees, unreadable manifests, unknown keys, failed deletes, a manifest written during the
// pass, the lock not held, failed reads), the rows and the lock on PostgreSQL (`TestArtifactGCRefs`,
// `TestArtifactGCLock`: of two instances one holds it; terminating the holder's session frees it), and the
// api tier's wiring (`TestArtifactGCOnTheAPITier`).
//
// **Tests** (`go test ./internal/artifacts/...`, in CI's go-test stage): one suite, run against both
// backends — file and tree round trips (the tree above), a 23 MiB file that S3 stores in 5 parts (checked from
// the ETag), digest mismatches at 1 KB and 12 MiB with known and unknown lengths (nothing under the key, no
// unfinished multipart upload, an existing object kept), a corrupted object (on S3, changed in the server's
// data directory) refused by Get, removed, and stored again by the next put, the same for a corrupted tree and
// GetDir (cache left clean), every S3 upload request carrying a
// CRC32C and a body damaged in transit refused by the server (through a proxy), 8+8 concurrent
// Gets of a file and a tree opening the backend twice in all, a caller giving up while another waits for the
// same download (one download, the other served), Exists/List/Delete/overwrite, invalid keys, and
// the unreachable case (the server stopped, or the directory moved away: every operation gives an
// `*UnavailableError` within seconds, a cached blob is still served, the cache holds no partial entry, and it
// all works again once the server is back). `Unpack` refuses `..`, absolute names, writes through a symlink,
// missing parents, outside hard links and GNU sparse entries; `FuzzUnpack` (never writes outside its destination)
// and `FuzzParseSpec` run in the fuzz stage. The flag's parsing and the daemon's start-up check (local, S3, no
// credentials, missing bucket, wrong secret, stopped server) have their own tests. The S3 side is a real
// server: Versity S3 Gateway (`versitygw`, Apache-2.0) with its posix backend, built by
// `scripts/build-s3-server.sh` from its Go module at the version in `internal/artifacts/s3test/versitygw.version`
// (`CGO_ENABLED=0`, cached in `/var/cache/airlock/versitygw/<version>/`, about 1.5 min the first time;
// `scripts/test.sh`'s setup stage runs it; the daemon never needs it). `internal/artifacts/s3test` starts it
// on a free loopback port with a temporary data dir, random credentials and one bucket, waits for it to answer,
// and stops it and removes the dir at the end; a missing binary fails the test naming the script.
//
// Shared 2-core VM (load average 4–6 from other suites), 2026-11-25. Both backends are bound by the same CPU
// work on two cores (SHA-256, zstd, unpacking; for S3 also the server's MD5 and its copy of the parts into one
// file at completion), so loopback S3 costs 1.1–1.7× the local directory. The tree packs to half its size (the
// text half compresses, the random half does not). Measured on the way, under heavier load (7–9): with SigV4-signed
// payloads (the client's default over plain HTTP, a signature per 64 KiB chunk) the puts ran at 90–99 MiB/s
// (tree) and 58–106 MiB/s (file), against 156 and 145 without, in the same conditions; hence
// `DisableContentSha256` (the SHA-256 in the signed metadata is checked end to end by every Get, and every
// upload request carries a CRC32C the server checks: minio-go sends one only with `TrailingHeaders`, and, in
// v7.4.1, for a single PUT only when `PutObjectOptions.Checksum` asks for it; `NewS3` and `Put` set both). Four parts in flight instead of one gave no clear gain here and left
// unfinished uploads behind after a digest mismatch (a part in flight landed after the abort), so uploads keep
// one part in flight.
//
// Measured figures: bench/README.md, "Artifacts (internal/artifacts, `airlock serve --artifacts`)".
package artifacts
