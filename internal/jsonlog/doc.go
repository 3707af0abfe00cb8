// Package jsonlog keeps bounded, append-only logs of JSON lines on disk, one
// pair of files per log in one directory, so what a sandbox's logs hold
// survives a daemon restart (internal/jsonlog/doc.go, "Logs on disk").
//
// A log named N is the files N.jsonl (current) and N.1.jsonl (previous).
// Every line is {"n":<sequence number>,"e":<entry>}. When the current file
// reaches Options.MaxLines lines or Options.MaxBytes bytes it is renamed over
// the previous one, so a log never holds more than two files' worth: the
// newest entries are kept, and the sequence numbers tell how many older ones
// were dropped. Appends only queue the entry; one writer goroutine per Store
// encodes and writes whatever is queued in batches, so the caller never
// waits for the disk. Reading skips lines that do not parse — a line torn by
// a kill in the middle of a write included — and cuts a torn last line off
// before the next append.
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # Logs on disk (internal/jsonlog)
//
// "A daemon restart loses nothing" includes what the sandbox logs and the egress audit say. Each live
// sandbox has two logs in `<data-dir>/logs/`: `<id>.events` (the daemon's lifecycle events of "Sandbox
// logs"; the agent's process events are already in the sandbox's own `agent.log`) and `<id>.egress` (the
// audit entries). One `jsonlog.Store` per daemon (`serve` opens it and hands it to `sandbox.Config.Logs`
// and `network.Config.AuditLogs`).
//
//   - **Where, and why not SQLite or the sandbox directory.** Append-only JSON lines, one file pair per log.
//     SQLite would put every NFLOG packet through the database the control plane uses (one writer lock, a
//     transaction or WAL frame per batch, and row deletion + VACUUM to bound it), for data that is only ever
//     appended and read whole. The sandbox's own `sandboxes/<id>/` is owned by the runtime: created late (by
//     `Start`, after the first events), removed by `Destroy` with `RemoveAll` — a late write from the log
//     writer racing that would make the removal fail (`ENOTEMPTY`) and keep a dead sandbox's row — and under
//     gVisor it holds live mounts. A flat directory that only the log store writes has none of that: removal is
//     ordered by the store itself.
//
//   - **Format and bounds.** A log named N is `N.jsonl` (current) and `N.1.jsonl` (previous); each line is
//     `{"n":<sequence number>,"e":<entry>}`. When the current file has 1000 lines or 512 KiB it is renamed over
//     the previous one (`jsonlog.Options`). So a sandbox that opens millions of connections holds at most
//     2 × 512 KiB + a line per log on disk, always the newest entries. The sequence numbers say how many there
//     have been: `dropped` = last number + 1 − entries kept (1000 in memory; the API shows those).
//
//   - **Writing without slowing the hot path.** `Append` only assigns the sequence number and queues the value
//     under the log's mutex (≈ 120 ns, the JSON encoding happens later); one writer goroutine per store takes
//     every log with queued entries, encodes them and appends each batch with one `write(2)` (open, write,
//     close: no descriptors held per sandbox). Whatever arrives while a batch is written makes the next batch
//     (group commit, no timer), so entries are normally on disk within a millisecond. If the disk falls behind,
//     a log's queue keeps at most 2 × 1000 entries (the newest; the rest are counted as dropped, as they would
//     be by the rotation anyway), so memory stays bounded too. Reads (`GET …/logs`, `…/network/log`) first write
//     that sandbox's queue, so whatever an API answer showed is in the file. No `fsync`: a killed daemon's
//     writes are in the page cache and survive it; a host power loss may lose the last seconds.
//
//   - **Torn writes.** A SIGKILL can leave half a line at the end of the current file. Reading skips every line
//     that does not parse (a torn or garbage line in the middle included) and takes only complete lines; before
//     the next append the torn tail is cut off (`truncate` to the last newline), so it never glues onto a new
//     line. A short write (disk full) is cut back to its last newline the same way; the failed batch is logged
//     and dropped.
//
//   - **Reload.** Lazily, the first time a sandbox is seen after a start: its events when `Restore` logs the
//     re-attach (or when its logs are asked for), its audit ring on the first packet or read. The newest 1000
//     entries are loaded, oldest first (both files, ordered by sequence number), and new ones are appended after
//     them with the numbering continued.
//
//   - **Lifecycle.** Fork children and sandboxes created from snapshots have new ids and so start with empty
//     logs. The events log is removed when the sandbox is (`Removed`), the audit log at network teardown; the
//     store then ignores further appends to those names (late NFLOG packets cannot bring a file back). At the
//     end of `Restore` the files of every sandbox that is not live are removed (destroyed while the daemon was
//     down, or a daemon killed between the removal of a sandbox and of its logs).
//
//   - **Tests.** `internal/jsonlog` (reload order across rotation, bounds under a 100 000-entry flood with
//     `MaxBytes`, torn last line and a garbage line skipped and cut before the next append, removal ignores late
//     appends, invalid names write nothing; `FuzzRead`: whatever a file holds, reading does not fail on it,
//     returns only valid JSON entries, and the next append reads back as the newest), `internal/audit` (`TestBookPersists`: ring reloaded equal, dropped
//     count, append after reload, Drop removes the file), `internal/sandbox/eventstore_test.go` (a second
//     manager on the same store and log dir re-attaches with the same events plus the re-attach, stale logs
//     removed at restore, kill removes the file), `internal/cli/net_test.go` (dropped shown), and
//     `test/gohttp/logsrestart_test.go` (`TestLogsSurviveRestart`: two real sandboxes with an allowOut/denyOut
//     policy connect to two addresses of a namespace the test creates in `AIRLOCK_E2E_EXT_NET` (.24/29) — one
//     allowed, one denied — one is paused; the daemon is SIGKILLed and restarted; v1 and v2 logs and the network
//     log of both start with exactly what they held before, new traffic and the re-attach/resume come after, and
//     the files are gone after the kill).
//
//   - **Cost** (`go run ./bench/cmd/auditlog-bench -n 100000 -sandboxes 100 -runs 3`, no root, a temp dir on the
//     data disk, shared 2-core VM at load 4–5 with other engineers' test suites running). `audit.Book.Add`, the
//     NFLOG reader's call, timed one entry at a time through a burst of 100 000 entries for one sandbox:
//     memory only (before, the same run's baseline) p50 60 ns / p99 61–70 ns / p99.9 61–150 ns, whole burst
//     18–23 ms; with the disk log (after) p50 111–120 ns / p99 1.3–1.8 µs / p99.9 12–28 µs, whole burst
//     44–127 ms; single worst calls 2.7–24 ms, when the writer goroutine and the GC take both cores from the
//     reader. So an entry costs the reader ≈ 60 ns more at the median (queueing and boxing the value; the
//     encoding is the writer's) — next to the netlink interface lookup the reader already does per packet.
//     Writer: 100 000 entries over 100 sandboxes on disk 0.55–0.76 s after the first append, 131–183 k
//     entries/s, 23–32 MB/s (an earlier run on a quieter machine: 585–713 k entries/s); NFLOG delivers one
//     entry per new flow, far below that. 100 000 entries left 17 MB for 100 sandboxes (≈ 174 B per entry).
package jsonlog
