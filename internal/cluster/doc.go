// Package cluster is the contract between the roles of an Airlock cluster
// (issue 17): `airlock serve --role api` (internal/cluster/gateway: stateless, the
// E2B API and sandbox proxy for every node) and `--role node` (today's
// daemon, which registers itself and heartbeats its capacity). It holds what
// both sides and the shared PostgreSQL store agree on: the headers of the
// api → node hop, the node states and time bounds, the node record, and the
// Store the cluster's own rows live behind (internal/store/postgres
// implements it). The hop's transport security (a cluster CA, per-node
// identities, mutual TLS) is in internal/cluster/clustertls; the E2B wire
// facts both sides read (list cursors, sandbox hosts and routing headers,
// the id syntax) in internal/cluster/wire.
//
// The api tier's room is this folder: the router (gateway), placement, and
// the composition of `--role api` (apirole). None of them links node code
// (internal/sandbox, the runtimes, internal/network, internal/api,
// internal/proxy, internal/daemon, ...), not even through another package:
// TestRouterImportsNoNodeCode (deps_test.go) fails when one does. What they
// need from the node side's packages comes from the contract or from leaves
// that import no sandbox code (internal/middleware, internal/store,
// internal/startup, internal/imagebuild/buildspec).
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # Cluster roles (airlock serve --role; internal/cluster, internal/cluster/node, internal/daemon/role.go, apirole.go)
//
// One binary, three roles. `--role all` (the default) is the single host: SQLite (or one daemon per
// PostgreSQL database), nothing below applies. A cluster is `--role node` daemons that run sandboxes
// and `--role api` instances in front of them, any number behind any load balancer, sharing one
// PostgreSQL database (`--store postgres://…`, required by both roles), a cluster CA with a
// certificate per node and one for the api tier (`--cluster-tls-dir`, or `$AIRLOCK_CLUSTER_TLS_DIR`),
// and a cluster secret (`--cluster-secret-file`, or `$AIRLOCK_CLUSTER_SECRET`; at least 16
// characters). `internal/cluster` is the contract of the roles: the hop's headers, node states, time
// bounds, the node record and the `cluster.Store` the PostgreSQL store implements (see "Store");
// `internal/cluster/clustertls` is the hop's transport security (below).
//
// **The api → node hop is mutual TLS with per-node identities** (issue 23, M1; before, it was plain
// HTTP with the secret as a bearer token, replayable by anyone who saw one request).
// `airlock cluster ca init --dir D` makes a CA (ECDSA P-256, `ca.crt` and `ca.key`, which stays with
// the operator); `airlock cluster cert --ca D --node ID --addr host:port --out DIR` writes a node's TLS
// directory (`ca.crt`, `node.crt`, `node.key`: server auth only, URI SAN `airlock:node:<id>`, DNS/IP
// SANs of its address), `--api` the api tier's (`api.crt`, `api.key`: client auth only, URI SAN
// `airlock:api`). Both roles refuse to start without a directory whose certificate chains to its
// `ca.crt` and names them (a node's must name its `--node-id`; a directory may instead hold
// `<node-id>.crt`/`.key` of several nodes, as a Kubernetes DaemonSet mounts one Secret). A node
// listens with TLS 1.3 only (`tls.NewListener`, `ServerConfig`): a client certificate is verified when
// given (chain to the CA for client auth, and it must name `airlock:api`, so a node's certificate fails
// the handshake even if issued without key usages), and the guard below refuses every request but the
// node's `GET /health` that came without one. The api tier dials node X from the nodes table with
// `clustertls.Transport`: every request names its node (`clustertls.WithNode` on its context), goes over
// a connection pool of its own per (node, address), and the server must present a certificate that
// chains to the CA for server auth and names `airlock:node:X` (the host name is not checked: the node id
// is the identity, the address only where to find it). So one node cannot call another as the api tier,
// a node cannot answer for another, and a row pointing at another node's address, or an address taken
// over, gets a 502 naming both identities. Every hop uses it: forwarded REST and sandbox traffic, list and
// metrics fan-outs, the internal move API, PTY WebSockets (`wss://`). A renewed certificate (new files in
// the directory) is served from the next handshake on, checked every 30 s; a new CA needs a restart.
// The cluster secret stays, required, as a second factor sent inside TLS: a certificate alone (one minted
// through a misused issuer) does not give a node's API. `scripts/run-cluster.sh` makes the CA and the
// certificates in its state dir (`tls/`); the Helm chart mounts Secrets, per-host directories or
// cert-manager Certificates ("Kubernetes").
//
// **A node** is today's daemon with an identity (`--node-id`, default the host name, lower-case;
// `--advertise-addr`, default `--listen` when it names an address that is neither unspecified nor
// loopback; `--node-labels`, plus `kvm` on a KVM
// host) and four additions:
//
//   - **Its store is scoped to it.** Sandboxes, snapshots and template builds rows carry `node_id`; the
//     node reads and writes only its own, so its restore at start, snapshot checks and reaper never touch
//     another node's rows. Templates and settings are shared. Its lease (one daemon per node id) keeps a
//     second daemon with the same id off. The template manager runs shared (`SetShared`): a template row
//     whose files are not on this node is another node's template, not a stale row to delete.
//
//   - **The api tier's certificate and the cluster secret guard everything.** The node's HTTP stack
//     (proxy → console → API) is wrapped by `node.Node.Guard` (internal/cluster/node): a request whose connection carries no
//     verified api-tier certificate (`clustertls.APIClient`) gets 401 `… (no api-tier client certificate of
//     the cluster CA)`, one without `X-Airlock-Cluster-Secret` (constant-time compare) 401
//     `this is an Airlock cluster node: requests come through the api tier`, except the node's own
//     `GET /health` (probes; a sandbox's `/health`, by header or host, is not public). The header is
//     removed before the request goes on, so no sandbox ever sees it, and so is the hop's TLS state
//     (`r.TLS`): the scheme the client used is the api tier's `X-Forwarded-Proto` (a template file
//     upload link built from `r.TLS` came back `https://` for a plain-HTTP api tier). Behind the guard the API and the
//     console skip the API-key check for requests marked `X-Airlock-Authenticated` (`Trusted`): the api
//     tier sets it on the requests whose key it checked and removes it from every other one (sandbox
//     traffic, a client's forged mark), so a request the api tier let through by its shape (a signed
//     template-file upload, whose signature only the node can check) still needs its signature; found in
//     review: without the mark such an upload was stored unsigned. Sandboxes cannot reach the
//     node's port anyway (the `input` chain drops what sandboxes send the host). Every response carries
//     `X-Airlock-Node: <id>`.
//
//   - **Heartbeats.** Once ready (default templates present), the node upserts its row every 2 s
//     (`cluster.HeartbeatInterval`): stated capacity (`--node-cpus`, default host CPUs × 4, the overcommit
//     a cgroup share allows; `--node-memory`, default host memory less the warm pool's reserve; sandboxes =
//     its subnet's /30 slots), what
//     its sandboxes hold (CPUs and memory of the running ones, the count of all), the templates on its disk
//     (names and hashes), its warm pool, runtime and labels. Each heartbeat bumps a generation `Gen`
//     before it samples; a create's response carries `X-Airlock-Node-Gen` = the current generation + 1,
//     read when the response starts (the sandbox is registered by then): the first heartbeat that counts
//     it, which the api tier passes to `Reservation.Confirm`.
//
//   - **Admission.** Each api instance counts only its own creates in flight, so the node checks every
//     create itself (`sandbox.Config.Admit`, after the limits are resolved, before anything is taken):
//     what its sandboxes hold plus creates admitted and not yet registered, plus this one, must fit the
//     capacity it states (CPUs, memory and the sandbox count), else 503 `node n1 is full: …`. A resume
//     of a sandbox moved here from another node is admitted the same way; local resumes and fork
//     children are not yet. The api tier places a create refused this way again on another node.
//
//   - **Reconcile after a loss.** A node whose heartbeats stop for 15 s (`cluster.LostAfter`: killed, or
//     cut off from the database) is marked lost by the api tier, which reports its running sandboxes gone
//     and removes their rows (paused ones stay: with `--artifacts` their images are in the store and
//     any node resumes them, see "Moving sandboxes between nodes"). When a heartbeat of that
//     node gets through again it reads state `lost`, kills every sandbox it still runs whose row is gone
//     or that is recorded lost (a row it wrote back meanwhile, e.g. by an automatic pause, does not make
//     it its own again), so none is ever served twice, and sets itself live once every such kill
//     succeeded (until then it stays lost: no creates). A node that restarts does the same through its
//     ordinary restore (a sandbox without a row is destroyed).
//
//   - **Restarts keep the sandboxes.** A single host re-attaches its running sandboxes after a crash;
//     a node must too, so the gap in its heartbeats must stay under `LostAfter`. From the moment its
//     store opens it touches its row every 2 s (`cluster.Store.Touch`: heartbeat time only, a lost node
//     stays lost) until its first full heartbeat, and a lease left by a predecessor that crashed on
//     this host is taken at once when that pid no longer exists (`BreakLease`; a live pid there, e.g. of
//     another PID namespace, is waited out up to the 30 s bound; a holder on another host is a second
//     node with the same id, refused). Found in review: the node used to wait 35 s for the lease, be
//     marked lost, and destroy every sandbox at restore. Heartbeat rows never go back a generation
//     (`WHERE nodes.gen <= excluded.gen`), and generations start at the node's start time in
//     milliseconds, so a restarted node's are newer.
//
// **The api tier** (`apirole.Run`, called by internal/daemon for `--role api`) opens the store unscoped (no lease: any number of instances), resolves
// the API key as a single host does (flag, `$AIRLOCK_API_KEY`, or the shared `settings` row), and serves
// `internal/cluster/gateway` (see "Cluster api tier") behind the request-id middleware: no sandboxes, no
// network manager, no runtime; its data dir holds only the api-key file. It prints the SDKs'
// `export E2B_API_URL=…` line like a single host; a node prints `airlock node <id> ready at <addr>`
// instead (clients never talk to a node).
//
// **Templates across nodes.** With `--artifacts` (S3, or a directory every node mounts) on the nodes
// and the api tier, a template built on one node is pushed there before its build reports ready, and
// any other node pulls it on first use (see "Artifacts"); the api tier then places a create on any node
// (`gateway.Options.PullTemplates`; holders are still preferred by the placer's template-miss cost), and
// a node heartbeats at once after a pull. Without it, creates go only to nodes holding the template.
//
// **Sandboxes across nodes.** With `--artifacts`, paused sandboxes and named snapshots are in the
// store too: a paused sandbox resumes on another node when its own is draining, lost or down, a
// snapshot starts on any node, `airlock node drain` moves a node's sandboxes away and a node stopped
// with SIGTERM pauses its running sandboxes into the store first (see "Moving sandboxes between
// nodes"). Without it they stay on their node.
//
// **What a cluster does not do yet:** the console's overview is one node's (the Nodes page shows
// the cluster; `GET /metrics` through the api tier is the whole cluster's); sandboxes paused without
// their memory (`keepMemory: false`) do not move.
//
// # Moving sandboxes between nodes (internal/cluster/node, internal/sandbox/move.go, internal/cluster/gateway/move.go)
//
// A cluster node with `--artifacts` and the shared PostgreSQL store (`sandbox.Config.Node`: the
// `sandbox.NodeHooks` that `node.Hooks` makes over `artifacts.Images` and `store.Mover`) keeps what another node may need in the artifact
// store. A single host (`--role all`), or a node without `--artifacts`, does none of this.
//
// **Objects.** `paused/<id>/<nonce>` (a key per pause: removing an earlier pause's image after its
// resume, in the background, never removes a later one) and `snapshots/<snapshot id>`: a manifest `{"version":1,"tree":"sha256:…",
// "packedBytes":n}` naming a tree (`trees/sha256/<hex>`, see "Artifacts"). A paused image's tree is a
// saved copy of the writable layer (`runtime.LayerSaver.SaveLayer`: disk.img under FIFREEZE, or the
// VM's overlay, RAM file, config disk and record), `checkpoint/` (the memory image, hard links) and
// `image.json` (the snapshotSpec: template and hash, runtime and its build, agent path, limits, token).
// A snapshot's tree is its directory (`disk.img`, `checkpoint/`, `manifest.json`, `config.json`).
// Deleting a key deletes its tree too (a memory image is never shared by two keys). `Images.Put` (`node.Images`) returns
// the manifest's digest, recorded in the row that names the key (`extra.imageDigest` of a paused
// sandbox, `imageDigest` in a snapshot row's spec); `Get`/`GetShared` fetch the manifest only with that
// digest and the tree it names only with the tree's digest, both before unpacking: an image rewritten in
// the store is refused (`ErrDigestMismatch`, 500), nothing of it is unpacked, and the sandbox stays paused
// with its row and image (`TestResumeRefusesRewrittenImage`; attacks: `TestReviewArtifacts`). An agent
// path read from a row or an image must end in `<64 hex>/airlock-envd` (`agentbin.InDir`).
//
// **Pause** (`sandbox/pause.go`; the upload is `node/upload.go`, told by the hooks). A pause answers once the checkpoint is durable on the node
// (the memory image's files fsync'd, the layer's file system synced, `disk.img` fsync'd): the row says
// `paused` with `extra.uploading`, and the upload (`hooks.ExportPaused`: layer saved by `Live.WriteImage`, image packed and put) runs in
// the background, retried with a backoff until it succeeds; then the row gets `extra.image =
// "paused/<id>/<nonce>"` and `extra.imageDigest` (movable). A resume on the same node stops the upload
// (no image is needed); a kill cancels it; a daemon restart finds the row `uploading` and the checkpoint
// kept, and uploads again (with its network gone — a host reboot — it uploads during `Reattach` and
// re-attaches it from the store). A user's pause first asks the store whether it answers (one `Stat`):
// if not, nothing is done and it answers 503 `pausing sandbox x: the artifact store is unreachable (…);
// the sandbox keeps running`, as when the upload came before the answer. An evacuation (drain, SIGTERM)
// pauses and uploads before it reports, and waits for a pending upload (the attempt in flight: its
// failure is the evacuation's error for that sandbox). Figures: `bench/pause` (bench/README.md).
//
// **Who may resume: one claim.** A row moves between nodes only through
// `store.Mover.ClaimSandbox(id, from, state)` (`NodeHooks.Claim`), one `UPDATE … SET node_id = me, state = $state WHERE id
// AND node_id = from AND state = 'paused' AND extra has an image` (a route notification when the node
// changes): of two claims one wins, the other gets `store.ErrMoved`. A resume on the node that paused
// it claims too (from itself, state `resuming`), so another node cannot adopt a sandbox while it
// resumes; a failed resume writes `paused` back. A daemon killed during a resume finds `resuming` at
// start and writes `paused` back.
//
// **Adopt and resume elsewhere** (`node.AdoptAndResume`, `node.Adopt`, `Manager.ClaimAdopted`, `resumeImported`). The api tier asks a live node
// to adopt (`POST /airlock/v1/internal/sandboxes/{id}/adopt {"from":"n1","resume":bool,"timeoutMs":n}`):
// it claims the row (state stays `paused`, slot −1, no address) and holds the sandbox as paused with no
// local files. The claim checks, under the row's lock, that this node can restore it — same runtime and
// runtime build (`extra.imageBuild`), the agent build here or in the store (`extra.agentBlob`: every
// export stores the agent binary by content, once per build) — and, for an adopt-and-resume (a drain's),
// that the node's admission has room: a node that cannot run it refuses (409/503) while the row is still
// the old node's, and the api tier tries another. The answer carries the node's heartbeat generation, as a
// create's does, so the placer counts the resumed sandbox until a heartbeat does. Its resume claims the row again (`resuming`), passes the node's admission, fetches the
// image into `<data>/imports/` (moved out of the artifact cache: used once; the fetch runs while the
// template, the agent build and the network are prepared), checks the runtime and
// its build and that the template under it is unchanged (pulling it if needed), then restores its
// memory image as a fork or a snapshot create does — a slot and network of this node (`prepareIn`, its own cleanup stack that
// never deletes the row), `CloneSaved`, restore, SIGUSR1, `/health` — but under its own id and token,
// and `/init` gives the agent its identity, env vars and the clock again. The row becomes `running`
// with the new slot and address, the image is deleted from the store. Processes, memory, files,
// background processes and open loopback sockets come back; connections from outside are reset as on
// any restore. Measured (same setup): adopt 8 ms, resume on the new node 267 ms (fetch 19 ms).
//
// **The old node lets go.** Its rows are scoped to it, so a claimed row disappears from its view:
// the api tier tells it right after a move (`POST …/internal/sandboxes/{id}/drop`), and `node.DropMoved`
// (every 5 s, one query, off the heartbeat) finds the rest: each paused sandbox with an image whose row
// it no longer sees is dropped, freeing the slot, network and files without touching the row or the
// image. Until then a merged list that gets the sandbox from two nodes keeps the owner's copy. Its
// PostgreSQL writes cannot take the row back: `PutSandbox` updates only a row of its own node (a
// `SetTimeout` racing the move gets 409-like `ErrMoved`), rows change node only by a claim; a resume there
// finds the claim refused (409) and drops it the same way; a kill there deletes nothing of another
// node's (the scoped delete finds no row, and the image is deleted only with a row). A node that comes
// back after a loss, or restarts, sees only what is still its own.
//
// **When the api tier moves a sandbox** (`gateway.ownerOrMove`, `forwardOwned`). Any request for a
// sandbox (API or sandbox traffic, reads too: a GET hands a paused sandbox off a draining node, where it
// stays paused) whose row is paused with an image (`cluster.Store.SandboxRoute`:
// `Movable`) moves it first when its node is draining, lost, no longer registered, or refuses the
// connection (a crashed node, before the 15 s loss bound): `placement.Place` of its template and
// limits with the old node excluded (the reservation is released at once: a paused sandbox holds
// nothing), adopt there, then the request is forwarded to the new node (after a refused adopt the route is read again: another api instance moved it → its new
// owner is used; still on the old node → the next node is tried; on the refusing node → its error is
// the answer). A paused sandbox still `uploading` (`Route.Uploading`) is not movable: on a draining
// node the api tier first asks the node to wait for the upload (`POST …/internal/sandboxes/{id}/uploaded`,
// bounded to a minute; on failure the draining node serves it); when its node is lost or refuses the
// connection the answer is 503 `sandbox x is paused on node n, which is lost, and its image was still
// being uploaded to the artifact store: no other node can resume it yet; its checkpoint is kept on node n,
// which finishes the upload when it is back` (test/cluster/13-pause-upload.test.mjs). A running sandbox
// of a draining node is remembered for 5 s, so its traffic does not read the database on every request
// (a connect or resume forgets it: the sandbox may be paused and movable now). A create from a snapshot whose node refuses the connection is placed on
// another node too. So `Sandbox.connect` of a sandbox
// paused on a dead node resumes it elsewhere at once (measured: node SIGKILLed, the next request moved
// it in 16 ms, the connect resumed it). A running sandbox of a lost node is still lost (its memory
// was on that node only).
//
// **Drain** (`POST /airlock/v1/nodes/{id}/drain`, `airlock node drain`). After the state is set, the api
// tier calls the node's `POST /airlock/v1/internal/evacuate`: the node pauses every running sandbox into
// the store, marked `evacuated` with what was left of its timeout (`LeftMs`), and uploads paused ones
// that have no image yet. Then each is adopted by another node, the running ones resumed there with
// their timeout (4 moves at a time; the node pauses 2 at a time). The drain runs to its end even when
// the client goes away. The answer (`cluster.DrainResponse`, the SDK's `NodeDrain`) lists `moved`
// (`sandboxId`, `node`, `state`, `was`) and `failed` (with the reason: e.g. paused without memory);
// `?move=false` (`airlock node drain --keep`) only stops placement. Measured with
// `go run ./bench/cmd/cluster-move` (below).
//
// **SIGTERM on a node** (`--drain-on-stop`, default on; needs `--artifacts`; `node.Node.DrainOnStop`):
// the node sets itself draining, writes `<data>/node-drained-on-stop`, evacuates (at most 4 minutes;
// the chart's grace period is 300 s) and shuts down; `--kill-on-exit` leaves the evacuated sandboxes'
// rows and images (`leaveMovable`). The next request for such a sandbox moves it (its node is draining,
// then gone) and, being `evacuated`, resumes it (an evacuated sandbox resumes on traffic like one with
// `autoResume`, with at least what was left of its timeout). Measured: the node exited 2.0 s after
// SIGTERM; the SDK's next command on the sandbox ran on another node with its process and file. A node
// that starts with the marker and finds itself draining goes live again by itself (an operator's drain
// stays).
//
// **Snapshots anywhere.** `CreateSnapshot` uploads the snapshot before it records it (a failed upload
// fails it, 503, the sandbox keeps running); `DeleteSnapshot` deletes the objects. A create naming a
// snapshot this node does not hold finds it with `store.Mover.AnySnapshot` (any node's row), fetches
// it into `<data>/imports/` for that create, and restores from there. The api tier sends such a create
// to the snapshot's node while it is live, else places it on any other node.
//
// The upload costs ~0.4 s of a pause here (a 64 MiB memory image, packed and hashed on a busy 2-core
// machine); the move ~0.3 s over a local resume (fetch, unpack, a fresh slot and network, `/init`). A
// drain is bound by the host's two cores (three nodes and the S3 server share them): moving 4 at a time
// did not beat one at a time here; on separate hosts the pauses and restores run on different machines.
//
// **The internal API** (`cluster.InternalPrefix`, `/airlock/v1/internal/…`) is served by a node only to
// requests with the cluster secret **and** `X-Airlock-Internal`, which the api tier sets on its own
// calls and removes from everything it forwards; the api tier answers 404 to any client request under
// that path. So neither a client (with or without the API key) nor a sandbox can adopt or evacuate.
//
// **Not done (yet):** sandboxes paused without memory do not move; the template under a moved
// sandbox is checked by hash, not by the bytes of its tree (two nodes that built one recipe each have
// their own bytes; runsc's restore checks the files it reopens); a microVM cluster on one machine would share
// the VMMs' cgroups between nodes (gVisor nodes get their own cgroup parent, `airlock-node-<id>`, because a
// sandbox that moves keeps its id). Objects left by rows deleted while the store was unreachable are
// collected by the api tier's artifact GC (see "Artifacts").
//
// Measured figures: bench/README.md, "Moving sandboxes between nodes (internal/sandbox/move.go, internal/cluster/gateway/move.go)".
package cluster
