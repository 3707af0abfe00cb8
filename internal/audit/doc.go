// Package audit keeps a sandbox's egress audit log: outbound connection
// attempts and DNS decisions, newest last, in a bounded ring per sandbox.
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # Egress audit log (internal/audit, internal/nflog, internal/network/audit_linux.go)
//
// `GET /sandboxes/{id}/network/log[?limit=N]` → `{sandboxID, entries: [...]}` (oldest first; `limit` 1..1000 keeps
// the newest N, else 400; 404 unknown sandbox) and `airlock net log <id> [--limit N] [--json]`. An entry is
// `{timestamp, kind: "connection"|"dns"|"policy", decision: "allowed"|"denied", rule, …}` (`policy`: an allowOut
// the operator's deny list keeps closed, see "Operator deny list"); connections add `protocol`,
// `ip`, `port`; DNS adds `name`, `qtype`, `answers`; the body's `dropped` counts older entries no longer
// kept (`airlock net log` prints it under the table). Each sandbox keeps the last 1000 entries in memory
// (`audit.Ring`) and on disk (`audit.NewBook` with the daemon's `jsonlog.Store`, "Logs on disk"), so they
// survive a daemon restart; they go with the sandbox (teardown).
//
//   - **Connections: NFLOG.** Every verdict rule on traffic leaving a sandbox (`input` drop → rule `host`,
//     `forward`: `other sandbox`, `sandbox pool …`, `blocked range …`, `operator deny …` (`deny_out`), the
//     sandbox's `allowOut X` / `denyOut X`
//     / learned-address rules, `internet`, `no internet`) is preceded by a copy of its match plus `ct state new
//     log prefix "<a|d>|<rule>" group <G>`: the first packet of every flow (TCP SYN, first UDP datagram, ICMP
//     echo; each retransmitted SYN of a dropped connection again, since it stays `new`) is copied — first 64
//     bytes — to the daemon, which reads the group on a netlink socket (`internal/nflog`, on
//     `github.com/mdlayher/netlink`; `github.com/florianl/go-nflog` is not served by the Go proxy here) with
//     queue threshold 1 (no batching delay). The reader maps the packet's input interface (host veth) to the
//     sandbox — a map filled by `Setup`/`SetPolicy`, rebuilt after a restart by matching the veth's peer
//     namespace id against our named namespaces — and parses protocol, destination and port from the IPv4
//     header. Learned addresses are logged as `allowOut <name> (resolved)` using the name that opened them.
//     Chosen over conntrack events because a dropped packet never becomes a conntrack entry: denied attempts
//     would be invisible. Established flows are not logged (one entry per attempt, not per packet).
//
//   - **Group.** `airlock serve --audit-nflog-group` (default derived from `--net-prefix`, 1000..60999; `-1`
//     off). The kernel lets one socket bind a group per network namespace, so two daemons on a host need
//     different groups (different prefixes give different defaults); if the bind fails the daemon logs a
//     warning and runs without the connection audit (DNS entries still work).
//
//   - **DNS.** The DNS filter records every query it answers: name, type, A answers, allowed (forwarded) or
//     denied (REFUSED), and the rule (`allowOut example.com`, `denyOut …`, `not in allowOut`, `default`).
//
//   - **Tests.** `internal/audit` (ring, book), `internal/nflog` (IPv4/port parsing, attribute decoding),
//     the root test `internal/network/dns_linux_test.go` (group 40704: denied before resolving, allowed as
//     `allowOut allowed.test (resolved)`, host attempt `host`, limit), `internal/api/network_test.go` (shape,
//     limit, 400/404), `internal/cli/net_test.go`, `test/e2e/egress.test.mjs` (both decisions for CIDR and
//     domain policies, DNS entries with answers).
package audit
