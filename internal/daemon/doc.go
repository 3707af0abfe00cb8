// Package daemon is the composition root of `airlock serve`: from a Config
// (the serve flags) it opens the store, picks and starts the isolation
// runtime, the network manager and the template store, builds the sandbox
// manager and the image builder, and serves the HTTP stack (proxy → console
// → REST API) until its context ends.
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # Daemon shutdown and two daemons on one host
//
// SIGTERM stops serving and leaves sandboxes running (they are re-attached on the next start);
// `--kill-on-exit` kills them. A systemd unit must use `KillMode=process`. Two daemons can share a
// host only with different `--data-dir`, `--net-prefix` (neither a prefix of the other) and
// `--subnet`; the test suite runs its daemon as `--net-prefix ale2e --subnet 10.79.0.0/16`.
// `internal/daemonlock` enforces it before anything is touched: `serve` takes an exclusive
// `flock` on `<data-dir>/daemon.lock` and on `/run/airlock/net-<prefix>.lock`, writes its pid,
// start time and flags into each, and refuses when another live daemon holds either, or holds a
// prefix that starts with this one's or that this one's starts with (checked with a non-blocking
// shared lock on the other lock files): `the data directory … is in use by another airlock daemon:
// pid 4242, started …: airlock serve --listen … --net-prefix ale2e --subnet 10.79.0.0/16 …`. The
// kernel drops a flock with its holder, so a SIGKILLed daemon's successor starts normally; a
// holder that is already dying (gone or a zombie whose threads are still exiting, as right after a
// SIGKILL) is waited for up to 15 s instead of refused. Before,
// a second daemon rebuilt the first's nftables table and removed its veths as stale. E2e:
// `test/gohttp/twodaemons_test.go`.
package daemon
