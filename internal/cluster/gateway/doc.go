// Package gateway is the request router of a cluster's api tier
// (`airlock serve --role api`, issue 17). It is stateless: it serves the E2B
// REST API and the sandbox traffic of every node by forwarding each request,
// unbuffered, to the `--role node` daemon that owns it over mutual TLS
// (internal/cluster/clustertls: the gateway proves it is the api tier and
// verifies it reached that very node; the cluster secret rides along), places creates with internal/cluster/placement, fans lists out to every
// node and merges them, and answers GET /health and its own node API
// (/airlock/v1/nodes) itself. The nodes, routes and lost sandboxes live in
// cluster.Store. It imports no node code (TestRouterImportsNoNodeCode in
// internal/cluster): the list cursors, sandbox hosts, routing headers and id
// checks it shares with a node's API and proxy are internal/cluster/wire's.
// internal/cluster/apirole composes it into `--role api`.
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # Cluster api tier (internal/cluster/gateway)
//
// `airlock serve --role api` keeps no state of its own: `gateway.New(Options{Store, Secret, TLS,
// APIKey, Domain, Template, VerifySignature, Transport, Logger, Placement, UnauthRate, UnauthBurst})`
// is its whole handler, and `Run(ctx)` its background work. Every request goes to a `--role node`
// daemon over mutual TLS (`clustertls.Transport`, verified to be that node: "Cluster roles")
// through one `httputil.ReverseProxy` (`FlushInterval: -1`, full duplex, Upgrade passed
// through): the client's `Host` is kept (nodes route `<port>-<id>.<domain>` by it), any
// client-sent `X-Airlock-Cluster-Secret` is replaced by the cluster's, `X-Airlock-Authenticated`
// is set when the gateway checked the request's API key and removed otherwise, `X-Forwarded-For`/
// `-Host`/`-Proto` are set (a load balancer's `X-Forwarded-Proto` is kept), and the node's
// `X-Airlock-Node` is passed on.
//
//   - **Registry** (`registry.go`). Every `HeartbeatInterval/2` (1 s) `Store.Nodes()` feeds the
//     placer: `Update` per row (with `Gen`), `SetState` Lost for `lost` rows or a heartbeat older
//     than `LostAfter` (15 s) — routing treats such a node as lost before the reaper does —,
//     Draining for `draining`, Live otherwise, `Remove` for rows gone, and `Remove` before the
//     `Update` of a node whose `startedAt` changed (it restarted: what was counted there is void;
//     a node's generations also keep growing across restarts, they start at its start time in
//     milliseconds). A node id the last read
//     does not know triggers one more read (at most every 100 ms). Every `ReapInterval`
//     `Store.ReapLostNodes(LostAfter)` runs (the store's advisory lock makes one instance do it)
//     and what it marks is logged.
//
//   - **Route cache** (`routecache.go`): sandbox id → node id, filled from `Store.SandboxNode`,
//     used only while `Store.WatchRoutes` runs; each notification drops its entry (a read that
//     raced a drop is not cached), a `Resync` or a broken watch drops all. Ids the store does not
//     know (nor lost) are remembered for 5 s (at most 65,536), so traffic to made-up ids reads the
//     database once per id and 5 s, not twice per request (ids are random: no client holds an id
//     before its create answered).
//
//   - **Sandbox traffic** (no API key; the node's proxy and the agent check tokens):
//     `E2b-Sandbox-Id`, or a `<port>-<id>.<domain>` Host that is not `api.<domain>`, → the
//     owner node; a header-less signed `/files?signature=` (it names no sandbox) → the node of the
//     sandbox whose token verifies it (op read for GET, write for POST/PUT). Unknown or
//     lost: the proxy's 502 body (`sandboxId`, the loss reason when there is one).
//
//   - **What unauthenticated requests may cost** (issue 23, M3 and L7; `ratelimit.go`, `tokens.go`).
//     A signature not shaped like one (`v1_` and 43 base64 characters) is a 400 before anything is
//     read. The tokens live in a copy on the api tier (`tokenIndex`: `Store.SandboxTokens`, only sandboxes
//     that have one): a signature no token in it verifies waits for a read that starts after the request
//     arrived (a sandbox created a moment ago is found), and reads are at most one per second, shared by
//     every waiting request (before: one full-table read per request). Requests without the API key that
//     would cost a store read (a route the cache lacks) or a move/resume (a paused sandbox whose node is
//     draining, lost or gone: E2B's autoResume, kept) and every signed lookup take a token from a bucket
//     per client address (`UnauthRate` 50/s, `UnauthBurst` 200; the connection's peer, so behind a
//     balancer the balancer's); empty → 429 naming the limit, `Retry-After: 1`. Traffic to a sandbox whose
//     route is cached on a live node or that was routed in the last 5 s (so a broken route watch does not
//     throttle every sandbox behind one balancer), an id cached as unknown, and requests with the key are
//     not limited.
//
//   - **API** (after CORS — the gateway's own answers only; a node's answer carries the node's —,
//     `GET /health` and the API key; public without a key: signed template-file uploads by their
//     shape (the node checks the signature), and what a browser loads before logging in to the
//     console — `GET`/`HEAD` of `/console` and `/console/…` except `/console/api/…`, and a
//     browser's `GET /` (text/html, no `X-API-Key`) which the node redirects there; and
//     `/volumecontent/…`, whose node checks the volume's token):
//
//     | request | goes to |
//     |---|---|
//     | `/sandboxes/{id}[/…]` (not `metrics`), `/v2/sandboxes/{id}[/…]`, `/console/api/sandboxes/{id}/pty` with a key header | the owner (`-clientID` suffix dropped); a paused sandbox with its image in the store whose owner is draining, lost, unregistered or refuses connections → moved first ("Moving sandboxes between nodes"); unknown → 404 `sandbox "x" not found`; in `Store.LostSandbox` or owner lost → 404 `sandbox x was lost with node n2 at <time>: <reason>` |
//     | `POST /sandboxes`, `POST /v2/sandboxes` | body read (1 MiB, else 413); `templateID` (default `base`) a snapshot → its node, or when it is not live and the nodes share artifacts, any other node (it fetches the snapshot), else 503; else `Place` with `Options.Template`'s CPUs/memory and `TemplateRequired`; 2xx → `Confirm(X-Airlock-Node-Gen)`, else `Release`; a node that cannot be reached, or whose admission answers 503 `node x is full` (nothing was taken there), → `Release`, placed again with it excluded (3 attempts; the last node's answer is passed on). A template no heartbeat lists yet: the nodes are read again and placed once more (a node heartbeats at once when its templates change, before a build's answer ends), else the live node of the template's newest build; no node in any state lists it → 404 `template 'x' not found`, as a single host answers; other refusals → 503 with the placer's message |
//     | `GET /console/api/sandboxes/{id}/pty`, a WebSocket upgrade without a key header (a browser's: the key comes in the first message) | the gateway ends it (`pty.go`): reads the `{"type":"auth","key"…}` message (10 s), checks the key (4401), finds the owner (4404 unknown or lost, 1011 store or node failure), dials the node's terminal (`wss://`, verified to be that node) with the cluster secret, sends the auth message on without the key (the node trusts the api tier) and relays messages both ways, each side's close code and reason to the other; `Origin` must match `Host` as on a node |
//     | `GET /sandboxes`, `/v2/sandboxes`, `/snapshots`, `/sandboxes/metrics` | every live and draining node in parallel, same query, merged (below) |
//     | `/templates/{id}/builds/{build}[/…]`, `/v2/templates/{id}/builds/{build}[/…]` | `Store.BuildNode`, else `TemplateBuildNode(id)` |
//     | `GET /templates/{id}/files/{hash}` | `TemplateBuildNode(id)`; the upload URL it answers gets `&template={id}` (the node's signature covers only hash and expiry) so that the `PUT /airlock/v1/template-files/{hash}` reaches the same node |
//     | `POST /v3/templates`, `/v2/templates`, `/templates`, `/airlock/v1/templates/{name}/build` | a live node holding the template under any tag (it has the layer cache of the last build), else the least loaded live node (a placement of 2 CPUs/512 MiB, released at once) |
//     | `GET /templates`, `/v2/templates` | every node, merged: a template on several nodes (the defaults are on all) once, oldest first |
//     | `/templates/{id}[/…]`, `/templates/aliases/{id}`, `/airlock/v1/templates/{name}`, `POST`/`DELETE /templates/tags` (the template is in the body) | a live node holding it (the exact `name:tag` first, then any tag of the name), else the node of its newest build, else any node (404 for an unknown one): a node answers only for templates on its disk |
//     | `GET /airlock/v1/nodes`, `POST /airlock/v1/nodes/{id}/drain`, `/undrain` | the gateway itself: the nodes table, plus `placement`: what this instance counts there beyond the heartbeat (creates in flight, confirmed ones no heartbeat counts yet); `SetNodeState` and the placer at once (404 unknown node), then a drain moves the node's sandboxes (unless `?move=false`) |
//     | `/volumes[/…]`, `/volumecontent/…` (`volumes.go`) | a live node with the label `volumes` (the shared volume root, `--volume-root`), in a random order, the next while a bodiless request cannot reach one; none in any state → 501, none live → 503. `GET /volumes` and `GET /volumes/{id}`: every live and draining such node, merged (the first node's answer, `mountedBy` the union of each node's own sandboxes, `usedBytes` the largest of the nodes' accounts). A create with `volumeMounts` (and a move of a sandbox that mounts volumes) requires that label in placement; no such node at all → 400 |
//     | `/airlock/v1/internal/…` | 404: the nodes' internal API is the gateway's own |
//     | `GET /metrics` | every live and draining node (`metrics.go`), asked for the classic text format whatever the scraper's `Accept`; each sample gets the label `airlock_node="<id>"`, families are merged by name (a type that differs between nodes keeps the first node's), text format out; a failed node is left out and named in `X-Airlock-Partial`. One scrape of the api tier covers the cluster |
//     | anything else (`/console/…`) | the live node with the lowest id; a bodiless request tries the next while nodes cannot be reached |
//
//   - **Merged lists** (`lists.go`). The v2 cursor is positional (`startedAt`, id), so each node
//     gets the same query and returns its first `limit` items past the cursor; the union is
//     sorted (desc, or `order=asc`), cut to `limit` (default and max 100), and `X-Next-Token` is
//     the cursor of the last kept item when anything was cut or a node had more;
//     `X-Total-Running` is the sum. Each sandbox of `GET /sandboxes` and `/v2/sandboxes` gets an
//     Airlock extension field `"clusterNode": "<node id>"`, the node that listed it (appended to
//     the node's JSON object as it is; E2B's SDKs ignore unknown fields — the spec's
//     ListedSandbox lists what they require, none forbids more). `GET /snapshots` likewise (oldest first, its own cursor
//     format), v1 lists are concatenated newest first, metrics maps merged. A node that fails
//     (no answer, 5xx) is left out, logged and named in `X-Airlock-Partial`; a node's 4xx (a bad
//     query) is the answer; all failing → 502.
//
//   - **Review fixes.** A create's reservation ends even when its answer breaks off (ReverseProxy
//     aborts the handler with a panic; it used to count on the node for good); a create is placed
//     again only when it never reached its node (a dial error), so a node that crashed after making
//     the sandbox leaves no duplicate; a template comes before a snapshot of the same name, as on a
//     node; fanned-out lists give each node 10 s; registry reads are serialised (an older read ending
//     last removed a node that had just registered) and a burst of creates refused for their template
//     shares one re-read; a node's redirect is never followed (the request carries the secret).
//
//   - **Failure answers.** Node unreachable → 502 `{"code":502,"message":"node n2 (addr)
//     unreachable: …"}`; store unreadable → 503 (`/health` too: `{"status":"ok","role":"api",
//     "nodes":{"live","draining","lost"}}` otherwise); no live node → 503.
package gateway
