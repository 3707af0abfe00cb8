// Package console serves Airlock's web console: the front-end built from
// web/console (embedded with go:embed) under /console/, and the console's
// own endpoints under /console/api/ — an overview of the daemon for charts
// and a terminal (PTY over WebSocket). Everything else goes to the next
// handler (the REST API), which the front-end calls directly.
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # Web console (internal/console, web/console)
//
// `airlock serve` serves a web dashboard at `/console/` (a browser opening `/` is redirected
// there: only a `GET /` that accepts `text/html` and carries no `X-API-Key`, so API clients
// are unaffected). It is a static single-page app plus two endpoints of its own; everything
// else it does goes through the existing REST API and the sandbox proxy, with the same API key.
//
//   - **Build and embedding.** `web/console` (Preact + Vite 6, which runs on Node ≥ 18, with
//     rollup's WebAssembly build via `overrides` so the lock file holds no per-platform
//     binaries; uPlot charts; xterm.js; the npm
//     `e2b` and `@e2b/code-interpreter` SDKs bundled for the browser) is built by
//     `scripts/setup.sh` (`npm ci` + `vite build`, skipped when a hash of the sources and lock
//     file matches `dist/.stamp`) into `internal/console/dist`, which `internal/console`
//     embeds with `//go:embed all:dist`. Only `dist/.gitignore` is checked in, so `go build`
//     and `go vet` work on a fresh checkout; such a binary serves a page saying to run
//     `scripts/setup.sh`. Hashed `assets/*` are cached as immutable, `index.html` is not.
//
//   - **Handler order.** `proxy.New(resolver, console.New({Next: api}), …)`: sandbox traffic
//     (`E2b-Sandbox-Id` headers, `<port>-<id>.<domain>` hosts, signed `/files`) is routed
//     first as before; the console handler takes `/console`, `/console/…` and the browser
//     `GET /`, and passes everything else to the API handler (auth, CORS, body caps unchanged).
//
//   - **Auth.** The login page checks the key with `GET /console/api/overview` and keeps it
//     in `sessionStorage` (this tab only); every call sends `X-API-Key`. Static files are
//     public (no data in them); the console's endpoints need the key (`X-API-Key` or
//     `Authorization: Bearer`, constant-time compare, 401 `{code,message}`).
//
//   - **Content Security Policy** on the console's pages: `default-src 'self'`, images also
//     from `data:`/`blob:`, `connect-src 'self' ws: wss:`, `frame-ancestors 'none'`,
//     `object-src 'none'`. Rich cell results are untrusted: HTML and Markdown (rendered with
//     `marked`) go into `<iframe sandbox="allow-same-origin" srcdoc=…>` — no scripts run there
//     (no `allow-scripts`, and the CSP forbids inline scripts anyway); the console only reads
//     the frame's height. PNG/JPEG/SVG are `<img>` with `data:` URLs (SVG in `<img>` runs no
//     script).
//
//   - **Sandbox answers on the console's origin.** Whatever the proxy forwards for a request whose
//     Host is not a `<port>-<id>.<domain>` sandbox host (header-routed traffic, and the signed
//     `/files` URLs a browser opens) is served on the API's origin, which is the console's: the
//     proxy sets `Content-Security-Policy: sandbox; default-src 'none'; …` and
//     `X-Content-Type-Options: nosniff` on it (`proxy.SandboxContentPolicy`), so a sandbox's
//     `.html` file runs no script there and cannot read the key in `sessionStorage`. Sandbox hosts
//     are the sandbox's own origin and keep the sandbox's headers. Unit
//     `TestSandboxContentOnAPIOrigin`, e2e `TestReviewEnvd/attack/R2-1-…`, browser
//     `test/console/review.test.mjs`.
//
//   - **Pages.** Overview (stat cards + uPlot charts from `/console/api/overview`, every 5 s);
//     Sandboxes (`GET /v2/sandboxes` with state and metadata filters, CPU/memory from
//     `GET /sandboxes/metrics`, every 3 s; kill, +5 min (`POST /sandboxes/{id}/timeout` with
//     the time left + 300 s), pause, resume, fork); a sandbox page (CPU and memory charts over
//     the sandbox's life from `GET /sandboxes/{id}/metrics?start=<startedAt>`, a terminal, a
//     file browser through the SDK (`Sandbox.connect`, `files.list/read/write`: download as a
//     blob, upload by file picker or drag and drop), logs from `GET /sandboxes/{id}/logs` or
//     "no logs" when that endpoint does not answer; an Activity tab (`Activity.jsx`) that
//     follows `GET /sandboxes/{id}/activity` as server-sent events: `fetch` with a streamed
//     body, since EventSource cannot send `X-API-Key` (the key is never put in a URL), a small
//     SSE parser, and on a dropped stream or a "lagged" entry a reconnect with `Last-Event-ID`
//     = the last id seen (backoff 0.5 s doubling to 10 s; 404/501 stop it); process, file and
//     egress entries with one-line summaries (denied egress highlighted), filters by group on
//     the view, pause (entries held and counted) and resume, the newest 2000 kept; the stream
//     is open only while the tab is shown, so the agent watches files only then; an Approvals
//     tab (`Approvals.jsx`, mounted on every tab so its label counts what is pending) that,
//     when `network.approval` has `stream: true`, follows `GET /sandboxes/{id}/network/approvals`
//     the same way (a reopened stream sends the pending questions again: one row per
//     decisionId), shows each question (ip:port, domain, protocol, age, a countdown to its
//     deadline) with Allow / Deny and a remember choice (once, "sandbox", or N minutes as
//     "Nm") POSTed to `…/network/approvals/{decisionId}` with `"by": "console"` (the API's refusal shown; a 404 drops
//     the row), and lists recent decisions from the feed's `egress.approval` entries
//     (`/activity?types=egress.approval`, whoever answered; its `decisionId` also drops a row
//     answered elsewhere; followed while the sandbox has a stream hook or the tab is shown);
//     a question past its deadline leaves the list. Without a stream hook
//     it says how to enable one, and turns one on (60 s deadline) or off with `PUT
//     …/network`, sending back allowOut, denyOut and allow_internet_access: only when the
//     policy has no rules, egressProxy or webhook, whose secrets GET does not echo and PUT
//     would clear; an Events tab
//     with the sandbox's E2B lifecycle events from `GET /events/sandboxes/{id}?orderAsc=true`,
//     every 5 s); Playground (template picker,
//     `Sandbox.create` of `@e2b/code-interpreter`, cells in Python/JavaScript/Bash run with
//     `runCode` and its `onStdout`/`onStderr`/`onResult` callbacks, so output streams; errors
//     show name, value and the traceback without ANSI colours); Templates (`GET /templates`
//     with tags, sizes, build count and status; a template's "Builds" opens its builds from
//     `GET /templates/{id}` with status, tags, times and a failure's reason, refreshed every second
//     while one runs, and an SDK build's "Log" shows `GET /templates/{id}/builds/{build}/logs`,
//     followed while it runs; and a build from a pasted Dockerfile: the browser
//     makes a one-file ustar archive and POSTs it to `/airlock/v1/templates/{name}/build`,
//     streaming the NDJSON log); Volumes (`Volumes.jsx`: `GET /volumes` with Airlock's
//     `sizeMB`, `usedBytes` and `mountedBy`, create (name, size) and delete with the API key,
//     and per volume a file browser over the content API `/volumecontent/{id}/{dir,file,path}`
//     with the token `GET /volumes/{id}` hands the key's holder: list, download, upload,
//     new folder, delete). The SDKs are configured with `apiUrl` = `sandboxUrl` =
//     the page's origin, so their agent traffic goes through the daemon's proxy.
//
//   - **Through a cluster's api tier** (`cluster` = `GET /airlock/v1/nodes` answered 200; a
//     single host's 404 changes nothing). A Nodes page (`Nodes.jsx`, every 3 s): totals, and
//     per node id and address, state (live; draining `‖` on amber; lost `✕` on red with
//     `lostAt`), runtime, labels, sandboxes / max, CPUs and memory reserved / capacity as bars,
//     heartbeat age (amber from 6 s), template names (hashes not counted; names in the tooltip),
//     warm pool, uptime, and "+N placing" when the answering api instance counts creates the
//     heartbeat does not yet. The sandboxes table gets a Node column (the list's `clusterNode`),
//     the sandbox page and the overview name the node that answered (`X-Airlock-Node`; the
//     overview is that one node's host and creates, and says so). The gateway makes the console
//     work there: its static files and a browser's `GET /` need no key, and it ends the
//     terminal's WebSocket itself (see "Cluster api tier").
//
//   - **`GET /console/api/overview`** → `{now, states: {running, paused}, createsPerMinute:
//     [{t, creates, failed}] (60 minutes), createLatency: {count, p50, p99} (successful
//     creates of the last hour, seconds, nearest rank), host: [{t, cpuPct, memUsed, memTotal,
//     diskUsed, diskTotal}] (every 5 s, last 30 min)}`. Backed by `metrics.Overview`
//     (`internal/metrics/overview.go`): the daemon's sandbox Observer feeds it each create and
//     its duration; a goroutine samples `/proc/stat` (busy vs. idle+iowait jiffies since the
//     previous sample), `/proc/meminfo` (MemTotal − MemAvailable) and `statfs` of the data dir
//     (`host_linux.go`).
//
//   - **Terminal: `GET /console/api/sandboxes/{id}/pty`**, a WebSocket (`github.com/coder/websocket`).
//     The upgrade checks `Origin` against `Host` (another site's page cannot open one; 403).
//     Browsers cannot set headers on a WebSocket, so the key comes in the first message
//     `{"type":"auth","key":…,"cols":C,"rows":R}` (10 s limit; or `X-API-Key` on the upgrade
//     for non-browser clients), never in the URL. The daemon then gets a Process client of the
//     sandbox's agent (`sandbox.Manager.ProcessClient`: running sandboxes only, the agent's
//     default user and the sandbox's access token, over the same guest connections as the
//     daemon's other agent calls) and `Start`s `/bin/bash -i -l` with a PTY of that size and
//     `TERM=xterm-256color`. Binary frames from the browser → `SendInput` (pty bytes, in
//     order); `{"type":"resize",…}` → `Update`; PTY output → binary frames; the shell's end →
//     `{"type":"exit","exitCode":N}` and a normal close. When the socket closes first, the
//     shell is killed (`SendSignal` SIGKILL). Refusals close the socket with 4401 (key), 4404
//     (unknown sandbox), 4409 (not running), 4400 (bad message) or 1011 (internal, logged).
//
//   - **Tests.** `internal/console` unit tests: static serving (index, hashed assets, client
//     routes, 404 shape, traversal, read-only), the placeholder, routing (the browser redirect
//     and nothing else of the API's), the overview's auth and numbers, and the PTY bridge
//     against a fake Process service over real HTTP + WebSocket (size, input, resize, exit
//     code, kill on close, every refusal). `test/console/console.test.mjs` (a `scripts/test.sh`
//     stage; `AIRLOCK_TEST_SKIP_CONSOLE=1` skips it) drives headless Debian `chromium` with
//     `playwright-core` against the test daemon: login (wrong key refused), a playground
//     sandbox, a matplotlib cell → `<img>` with a decodable PNG, `print` lines that arrive
//     while the cell still runs, a traceback, a DataFrame in a script-less iframe, a Bash cell,
//     hostile HTML whose `<script>` and `onerror` must not touch the page, Markdown, SVG and
//     JSON results, a JavaScript cell, the terminal running `ls`, uploads by file picker and by drop (then `cat` in the
//     terminal), a wrong-key socket refused, a template built from a pasted Dockerfile,
//     metadata and state filters, pause and resume, extend and kill from the table, the overview counting the create, and no errors in the
//     browser console; on a single host also no Nodes tab (the nodes probe answers 404) and no
//     Node column. `test/console/cluster.test.mjs` (same env, pointed at an api tier with ≥ 2
//     live nodes; it fails rather than skips elsewhere) covers the cluster: the console loads
//     key-less through the api tier, the Nodes view's rows match `GET /airlock/v1/nodes`
//     (state, runtime, CPUs, sandboxes, template count, labels) and refresh, lost and draining
//     markers (the nodes answer replaced in the browser with `page.route`), two sandboxes' Node
//     cells and the sandbox page's node match `X-Airlock-Node`, the Nodes view counts them, the
//     terminal runs a command through the api tier, and no browser errors. Screenshots of each
//     page go to `$AIRLOCK_TEST_ARTIFACTS` (default `<test log dir>/console`; `cluster-*.png`).
//     `test/console/volumes.test.mjs` (same stage) drives the Volumes page: create with a size
//     limit, a bad name's 400, use and a mounting sandbox shown, upload, download, a new folder,
//     deletes reaching the volume, and deleting the volume. `test/console/activity.test.mjs`
//     (same stage): a sandbox with a deny-all egress policy; its Activity tab's first stream is
//     answered by `page.route` with one canned entry, id 1, and the reopened request must carry
//     `Last-Event-ID: 1` (and the key only in `X-API-Key`); then `sh -c 'echo hi >
//     /home/user/f'` and a `curl` to a denied address run through the `e2b` SDK show as
//     process.start, file and a denied egress.connect row live; the filters hide and show each
//     group; entries that arrive while paused are counted, not shown, until resume; no id twice;
//     the Events tab lists `sandbox.lifecycle.created`. `test/console/approvals.test.mjs`
//     (same stage): a sandbox with `network.approval` `{stream: true}` and a deny-all policy
//     curls addresses in a namespace the test owns (`<AIRLOCK_E2E_EXT_NET>.16/29`); each held
//     curl shows as a pending row, Allow lets it connect, Deny refuses it at once, an allow
//     remembered for the sandbox's life lets a repeat through unasked; one answered by REST
//     and one left past its deadline leave the list and show as decided (by timeout); a
//     remember the API refuses is shown and leaves the row; one address per step, since an
//     answer "once" stays in the kernel's sets for 2-3 s; the first stream is ended by `page.route` and
//     reopened; a sandbox without the hook says so and is switched on and off, its policy kept.
package console
