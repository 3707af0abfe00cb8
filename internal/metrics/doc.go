// Package metrics samples per-sandbox resource usage into ring buffers kept
// for each sandbox's life (served as E2B SandboxMetric lists) and exposes the
// daemon's Prometheus metrics.
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # Metrics
//
// `internal/metrics.Collector` samples every running sandbox every `--metrics-interval` (default
// 5 s) through `runtime.Stats` (gVisor: `runsc events --stats` for CPU time, memory in use and
// tasks; the host memory cgroup for the limit and page cache; `statfs` of the ext4 writable layer
// for disk) and keeps the samples in a ring buffer per sandbox (17 280 samples = 24 h at 5 s, the
// longest sandbox life, ~1.7 MB when full), dropped when the sandbox is gone. One reading costs one
// `runsc events` exec (~25 ms); at most 4 run at once. A sandbox that the host's cgroups show idle
// since its last full reading (CPU under 0.5 % of a core, memory within 1 MiB) repeats that reading
// with the new time, for up to a minute (`internal/runtime/gvisor/stats_memo.go`): the exec and the
// Sentry's side of it were most of what 100 idle sandboxes cost the host. The first sample is taken right after a
// create (the manager's `Observer` hook, `internal/sandbox/observer.go`); `cpuUsedPct` is the CPU
// time between two samples over the wall time and the sandbox's CPU count (0 for the first sample).
//
//   - `GET /sandboxes/{id}/metrics?start=&end=` (unix seconds, both ends inclusive; default from the
//     sandbox's start to now) → E2B `SandboxMetric[]` (`timestamp`, `timestampUnix`, `cpuCount`,
//     `cpuUsedPct`, `memUsed`, `memTotal`, `memCache`, `diskUsed`, `diskTotal`); 404 for an unknown
//     sandbox, 400 for a bad or inverted window, `[]` for a window without samples.
//
//   - `GET /sandboxes/metrics?sandbox_ids=a,b` → `{"sandboxes": {id: newest SandboxMetric}}`; unknown
//     ids are left out (at most 100 ids).
//
//   - `GET /metrics` on the daemon's listener: Prometheus text format, **behind the API key** like the
//     rest of the control plane (`X-API-Key` or `Authorization: Bearer <key>`, which is what a
//     Prometheus `authorization: {credentials: …}` scrape config sends). Series:
//     `airlock_sandboxes_running`, `airlock_sandbox_creates_total{result=success|user_error|error}`,
//     `airlock_sandbox_create_duration_seconds` (histogram, successful creates),
//     `airlock_sandbox_step_seconds{op,kind,step}` (histogram, each named step of a create, pause and
//     resume that succeeded; the names are in internal/sandbox/doc.go, "Forward steps"),
//     `airlock_errors_total{op=create|sample}`, per sandbox `airlock_sandbox_{cpu_used_percent,
//     cpu_count,memory_used_bytes,memory_limit_bytes,disk_used_bytes,disk_limit_bytes,tasks}
//     {sandbox_id}` from the newest sample, plus the Go runtime and process collectors.
package metrics
