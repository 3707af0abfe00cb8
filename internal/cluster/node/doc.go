// Package node is the `--role node` side of an Airlock cluster (issue 25:
// the node role has a folder of its own). A node is today's single-host
// daemon plus what this package adds; internal/cluster holds the contract
// both roles share, internal/cluster/gateway the api tier.
//
// What is here:
//
//   - node.go: Node, built by the daemon from its flags (daemon/node.go,
//     node.Config) and given the sandbox manager once it exists (Attach).
//     Admission (Admit, sandbox.Config.Admit: a create or an adopt-and-
//     resume past the capacity the node states is refused with a 503),
//     heartbeats (Run: capacity, load, templates, warm pool, every
//     cluster.HeartbeatInterval; BeatNow when templates change;
//     KeepAlive while a restarting node re-attaches), reconcile (a node the
//     api tier marked lost kills what it still runs without a row, then
//     goes live), the guard of its HTTP stack (Guard: mutual TLS with the
//     api tier's certificate and the cluster secret; the create
//     generation header), the internal API only the api tier calls
//     (POST /airlock/v1/internal/…: evacuate, sandboxes/{id}/adopt,
//     …/uploaded, …/drop) and drain on stop (DrainOnStop, with its
//     marker file: a node that drained itself when stopped goes live again
//     when it is back; an operator's drain stays).
//   - adopt.go: AdoptAndResume (the node's admission asked inside the
//     claim, then the resume) and the loop that drops paused sandboxes
//     another node adopted (runDropMoved).
//   - moves.go: the node's moves, built on a few primitives of the
//     manager that run inside its per-sandbox operation locks: Adopt
//     (sandbox.Manager.ClaimAdopted, which drops a stale copy here
//     first), Evacuate (Live.Evacuate for each sandbox of
//     Manager.LiveList, two at a time), DropMoved and DropIfMoved (the
//     node's rows against Live.IdleWithImage, then Live.Drop) and
//     AwaitUpload (Live.AwaitUpload). Rows is the node's view of its rows
//     in the shared store.
//   - hooks.go: Hooks, the node's implementation of sandbox.NodeHooks,
//     the one seam between the single-host core and the cluster: paused
//     images under paused/<id>/<nonce> and named snapshots under
//     snapshots/<id> in the artifact store (Images: artifacts.Images),
//     agent builds by content, claims and the cluster's snapshot names
//     through the shared store (store.Mover). A single host has no hooks
//     (sandbox.Config.Node is nil) and never branches on the cluster.
//
// Where does a node adopt a sandbox? serveAdopt (node.go) →
// AdoptAndResume (adopt.go) → Adopt (moves.go) →
// sandbox.Manager.ClaimAdopted (sandbox/move.go: the claim,
// NodeHooks.Claim → hooks.go) → sandbox.Live.ResumeImported
// (sandbox/move.go: NodeHooks.FetchPaused, then the restore of the memory
// image, sandbox/create_restore.go). An adopted sandbox resumed later (by
// its user or its traffic) goes through Live.Resume (pause.go), which
// takes the same resumeImported.
//
// The mechanics the core itself calls stay in internal/sandbox: move.go
// (the export of a paused image, which a pause calls; the resume of an
// imported one, which Resume calls; one sandbox's evacuation, leaving
// paused sandboxes to the store when the daemon stops) and upload.go (the
// background upload a pause starts and a restart finishes). They run
// inside the manager's per-sandbox operations and locks, and call the
// hooks at the points listed on sandbox.NodeHooks.
//
// The design of moves, claims and uploads is in internal/cluster/doc.go
// ("Moving sandboxes between nodes").
package node
