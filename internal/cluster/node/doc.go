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
//     AwaitUpload (over upload.go's state). Rows is the node's view of its
//     rows in the shared store.
//   - upload.go: the background upload of paused images (issue 24; here
//     since issue 25) and the export of a paused image (ExportPaused: the
//     agent binary by content, then the directory sandbox.Live.WriteImage
//     writes, under paused/<id>/<nonce>). The core tells the hooks when:
//     a pause whose checkpoint is durable (Paused: the upload starts,
//     retried with a backoff, and the row is written by
//     sandbox.Live.CommitUpload), a restart (Reattached: an upload cut
//     short starts again), a resume here (Resuming: cancelled, waited
//     for), a kill (Gone: cancelled), an evacuation or a stop with
//     --kill-on-exit (AwaitUpload), the manager's Close (Close). The state
//     (one upload per sandbox, its attempts and last error) is the hooks';
//     a single host has none of it.
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
// What stays in internal/sandbox (move.go) runs inside the manager's
// per-sandbox operations and locks and calls the hooks at the points listed
// on sandbox.NodeHooks: the writing of a paused image's directory
// (Live.WriteImage) and the commit of an uploaded one (Live.CommitUpload);
// the resume of an imported image (resumeImported, which Resume and
// Live.ResumeImported call: the claim and the fetch are hooks, the rest is
// the core's restore of a memory image: the network, the layer, the wake,
// the agent's init, the commit); one sandbox's evacuation; leaving paused
// sandboxes to the store when the daemon stops.
//
// Tests: the move, upload and evacuation tests are here (move_sandbox_test.go,
// upload_test.go, evacuate_test.go), on two managers over sandboxtest's
// fakes (sandboxtest.TwoNodes: a shared sandboxes table and an artifact
// store in a directory).
//
// The design of moves, claims and uploads is in internal/cluster/doc.go
// ("Moving sandboxes between nodes").
package node
