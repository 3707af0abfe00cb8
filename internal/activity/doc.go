// Package activity keeps each sandbox's live activity feed (an Airlock
// extension, issue 28 part 2): typed entries ("egress.connect",
// "egress.dns", "process.start", …) with an id that grows by one per
// sandbox, in a bounded in-memory ring, on disk, and fanned out to live
// subscribers.
//
//   - **Ring and retention.** A sandbox keeps its newest Options.MaxEntries
//     entries (`airlock serve --activity-max-entries`, default 5000; 0 turns
//     the feed off) no older than Options.MaxAge (`--activity-max-age`,
//     default 24h; older entries are skipped on read and trimmed on write).
//   - **Disk.** Every entry is appended to `<data-dir>/activity/<id>.activity`
//     through a `jsonlog.Store` of its own (batched by one writer goroutine,
//     the publisher never waits for the disk; files bounded by MaxEntries
//     lines). The ring of a sandbox is read back from its file the first time
//     the sandbox is seen after a daemon start, and ids continue from the
//     last one. Files of sandboxes that are gone are removed by GC after the
//     re-attach, and a sandbox's file when its network is torn down (Drop).
//   - **Subscribers.** Subscribe returns the backlog after an id and a channel
//     of the entries that follow, taken under the feed's lock (no gap, no
//     duplicate). Publishing never blocks: a subscriber whose buffer
//     (SubBuffer entries) is full is closed and marked lagged; the API ends
//     its stream with a "lagged" entry naming the last id it sent.
//   - **Egress** (Egress, an audit.Observer): every connection attempt the
//     NFLOG reader sees ("egress.connect": protocol, ip, port, verdict,
//     rule, and "domain", the name the sandbox's DNS filter last answered
//     with that address), and every DNS decision ("egress.dns"). Byte
//     counts come when a flow ends ("egress.end", EgressEnd: protocol, ip,
//     port, domain, bytesOut, bytesIn, packetsOut, packetsIn, durationMs),
//     from the host's conntrack (internal/network/conntrack_linux.go);
//     IP-level bytes, headers included. NFLOG copies only a flow's first
//     packet, so it cannot count them.
//   - **Processes** (Tracer, gVisor only): runsc's runtime monitoring. The
//     daemon listens on <data-dir>/trace/trace.sock (SOCK_SEQPACKET) and
//     writes trace.json, passed as `runsc --pod-init-config` on run and
//     restore; runsc connects and the sentry sends `sentry/execve`
//     ("process.start": pid, ppid, path, argv, uid, cwd) and
//     `sentry/exit_notify_parent` ("process.exit": pid, argv, exitCode or
//     signal; only for pids that exec'd). The sandbox id is the point's
//     container id. No polling; the sink drops rather than waits.
//   - **Processes on microVM** (ProcFollower): the agent subscribes, from
//     boot, to the guest kernel's proc connector (netlink, CN_IDX_PROC; the guest
//     kernel has CONFIG_PROC_EVENTS) and, at each exec, reads argv, exe,
//     PPid, Uid and cwd from /proc/<pid> (internal/envd/procevents); same
//     entry shapes as above, exits only for pids that exec'd, the agent's
//     own pid left out (commands started through the API show, as on
//     gVisor). The agent keeps the events in a ring (4096) with sequence
//     numbers and serves GET /airlock/process-events?after=N (NDJSON that
//     stays open; the proxy never forwards it). The daemon keeps one
//     stream open per running microVM (checked each second against its
//     in-memory list, internal/daemon/procfeed.go), always, as gVisor's
//     entries are recorded whether or not someone listens; a stream broken
//     by a pause resumes after the last sequence number, so nothing is lost
//     or repeated. The first stream of a daemon asks for the whole ring and
//     keeps only events newer than the sandbox (a boot snapshot's or a fork
//     parent's ring) and than the feed's newest process entry (a daemon
//     restart); times are compared on the host's clock (the stream's first
//     line is the guest's clock, and every event is corrected by the skew:
//     an emulated guest's clock lags). An agent that answers 501 (a kernel without the connector)
//     is not asked again.
//   - **Moved sandboxes** (Arriving, cluster): a sandbox adopted from
//     another node (drain, move, resume elsewhere) keeps its entries on the
//     old node (dropped there with the sandbox); the new node numbers from
//     the time in microseconds (past any id the old one gave, within a
//     JavaScript number's exact range), so a follower reconnecting through
//     the api tier with Last-Event-ID or ?since= misses and repeats none.
//   - **Files** (WatchFiles, the hub's onListen): while a sandbox has at
//     least one subscriber whose types take file entries, the agent's recursive WatchDir on /home/user
//     and /tmp ("file.create", "file.write", "file.rename" with the old
//     path, "file.delete"); one file.write per path per WriteWindow, at
//     most FileRate file entries a second, then one "file.dropped".
//     These limits (internal/filefeed) are applied in the agent: the feed's
//     WatchDir carries the filefeed.Header request header, the agent echoes
//     it and sends only the events the limits keep (no CHMOD), with the
//     count its cap left out as an empty-named EVENT_TYPE_UNSPECIFIED event
//     (entry.size) before the next one. The host then applies only the
//     sandbox-wide rate cap (the two paths' watches share it) as a second
//     guard; behind an older agent (no echo) it applies all the limits
//     itself. SDK watches (no header) still get every event. The agent
//     serves the feed's watch with raw inotify (IN_ISDIR instead of an
//     lstat per create, events read and flushed in batches 20 ms apart;
//     internal/envd/filesystem's doc). Once the cap's second is used up,
//     the agent leaves the events in the kernel's queue until it ends and
//     then reads and counts them in one go (filefeed.Limiter.Full): a
//     flood costs a few reads a second, not fifty. The host side of a
//     listener is small (daemon +2…6 ms CPU, listener +1…7 ms per
//     200-file run; bench/README.md's profile): the cost is in the sandbox.
//
// A nil *Hub is a feed that is off: every method does nothing.
package activity
