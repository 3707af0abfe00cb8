// Package network gives every sandbox its own network namespace, a veth pair
// and its own address, and enforces the isolation policy with nftables:
// sandboxes reach neither the host (daemon, loopback services) nor each other;
// outbound internet goes through NAT only when allowed.
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # Network
//
// Every sandbox gets a network namespace `airlock-<id>` (`/var/run/netns/airlock-<id>`) and
// a veth pair: host side `<prefix≤10 chars><slot as 5 hex digits>` (e.g. `airlock0001f`) with the `.1` address of its /30 slot, guest side `eth0`
// with the `.2` address of its /30 slot (pool `10.77.0.0/16`). The agent listens on the
// guest address, port 49983; the daemon dials it directly from the host namespace.
// Netlink dumps (link and address lists) that the kernel reports interrupted — the
// tables change while other sandboxes' veths come and go — are read again (`retryDump`).
// At start the manager makes `/var/run/netns` a shared mount point of its own (as `ip netns add`
// does), and a namespace's removal takes off every mount on its name, hidden ones included
// (`netns_linux.go` says why a name could stay "busy" for ever). A kill first `Cut`s the sandbox:
// one nftables batch adds its host veth name to the set `cut_ifaces`, and rules at the head of
// `input`, `forward` and `output` drop every packet from or to it (the host's own TCP is reset), open
// connections included. `Cut` makes no rtnetlink call: deleting a veth waits on the kernel's rtnl
// lock (0.35–1.6 s on a loaded host, issue 24). `Teardown` later deletes the veth, then takes its
// name out of `cut_ifaces` (the caller frees the slot only after that), then the namespace; a
// restart keeps the cut of a veth that still exists, and `Setup` clears a leftover cut of its name.
// nftables table `inet airlock`:
//
//   - `input`, `forward`, `output` (the host's own packets): first, everything from or to a veth
//     in `@cut_ifaces` (killed sandboxes awaiting their teardown) is dropped.
//
//   - `input`: packets arriving from sandbox veths to the host are dropped unless part of
//     a connection the host opened (ct established/related) — sandboxes cannot reach the
//     daemon port or any host service; the one exception is DNS of sandboxes with domain
//     rules, redirected to the daemon's filter on their own host address (see "Egress policy").
//
//   - `forward`: sandbox → sandbox dropped; sandbox → the pool and the always-blocked ranges
//     (0/8, 127/8, 169.254/16 with cloud metadata, Alibaba's metadata server 100.100.100.200,
//     multicast, 240/4; Azure's WireServer 168.63.129.16 except DNS, udp/tcp 53, since it is also
//     Azure's resolver) dropped; then the set `blocked_addrs` (the cluster's own addresses: every
//     node's advertise address, the store's host, the artifact store's endpoint when
//     `$AIRLOCK_S3_ENDPOINT` names one — `internal/network/blocked_linux.go`, filled by
//     `internal/daemon/blocked.go` at start and, on a cluster node, from the nodes table every 10 s
//     of its heartbeat loop) dropped, so that no `--deny-out none`, `--deny-out-except`, allowOut or
//     public addressing opens them; then the operator's deny list (`jump deny_out`, see "Operator deny list"); sandbox → outside
//     accepted only for sandboxes with internet allowed (a set of allowed veth names) or an
//     allowOut entry (the `egress_policy` verdict map, see "Egress policy"); replies accepted
//     by ct state. The host itself, on any of its addresses (a LAN address included), is
//     never a `forward` destination: packets to it go through `input`, which drops them.
//     IPv6 from a sandbox is never forwarded: the accepts match IPv4 only, the final drop
//     matches every family (and the host veths have IPv6 disabled).
//
//   - `postrouting`: masquerade for the sandbox pool out of non-sandbox interfaces.
//     Under gVisor the guest loopback is gVisor's own netstack loopback, so `127.0.0.1` inside
//     a sandbox is never the host's.
//
// # Steering to the egress proxy (network.rules, issue 29; intercept_linux.go)
//
// With Config.InterceptPort (the daemon's egress proxy port) the table has the set `intercept_addrs`
// (`ifname . ipv4_addr`, flags timeout). A sandbox with rules (Options.Intercept: its ruled domains)
// has its DNS filtered; the A answers of a ruled name are added as `<host veth> . <address>` for
// max(TTL, MinLearnedTimeout) before the answer is sent. Prerouting DNATs the sandbox's TCP to such an
// address on 443 or 80 to the host side of its /30, port InterceptPort; `input` accepts TCP to that
// port only when conntrack says it was DNATed and the address is the incoming veth's. A policy change
// clears and relearns; teardown deletes the sandbox's elements. A microVM needs nothing more: its TAP is
// joined to the netns's eth0 by tc mirred (internal/runtime/microvm), so the guest's frames leave eth0 and
// enter the host at the veth like gVisor's, before prerouting and conntrack (DNAT, SO_ORIGINAL_DST and the
// DNATed-only input accept hold as they are); the proxy's replies come back through eth0's ingress redirect
// to the TAP. Tests: root `intercept_linux_test.go`
// (steering by address, by DNS, the port closed to direct dials) and `intercept_proxy_linux_test.go`
// (with the real proxy: the secret injected for the ruled name, none for another Host, plain HTTP
// untouched).
//
// # Tunnelling through network.egressProxy (SOCKS5, issue 29; socks_linux.go)
//
// With Config.SocksPort (the daemon's SOCKS relay, internal/socksrelay) the table has the set
// `socks_ifaces` (host veths of sandboxes with an egressProxy, Options.EgressProxy). Such a sandbox's
// DNS always goes through the filter, which records what each address was resolved from (the relay
// asks the SOCKS server for that name, Manager.ProxyName). Its TCP: the filter chain `socks_pre`
// (prerouting, priority -150, original direction only, DNS and the microVM volume server excepted)
// jumps to `socks_out`, which holds the same rules `forward` applies to a sandbox's outbound packets,
// so its policy still decides on the original destination; then prerouting NAT (after the DNS and
// interception redirects: a ruled connection goes to the interception proxy, whose upstream dial
// is the same SOCKS dial) DNATs it to the host side of its /30, port SocksPort; `input` accepts
// exactly that (DNATed, to the incoming veth's address). `forward` drops everything else from it
// (UDP but DNS, ICMP, anything that missed the redirect), logged as "egressProxy: direct traffic".
// A microVM's packets reach the host on the same veth, so the same rules apply to it. Tests: root
// `socks_linux_test.go` (relayed with the resolved name, any port; denied destinations and internet
// off dropped before the relay; its port closed to direct dials; direct again without the proxy),
// `test/gohttp/egress_proxy_test.go` and `test/e2e/egress.test.mjs` (a real SOCKS5 server).
//
// # Egress policy (allowOut / denyOut)
//
// `network.allowOut` / `network.denyOut` on create (v1 and v2 bodies) and `PUT /sandboxes/{id}/network`
// (`sbx.updateNetwork`, body `allowOut`/`denyOut`/`allow_internet_access`; the whole policy is replaced,
// omitted fields are cleared, so `{}` means "internet on, no lists"; 204, 404 unknown sandbox, 409 during a
// pause/resume/fork) take IPv4 addresses, CIDRs and domain names (`internal/network/egress.go`, at most 256
// entries): `example.com` (that name only) and `*.example.com` (every name below it, not `example.com`
// itself), normalized to lower case without a trailing dot (`internal/network/domain.go`: LDH labels of
// 1–63 characters not starting or ending with `-`, at least two labels, a non-numeric last label, `*` only
// as the whole first label). IPv6, bad CIDRs and junk names answer 400 naming the entry.
//
// Semantics are E2B's: denyOut blocks its destinations; allowOut takes precedence over denyOut (`denyOut:
// ["0.0.0.0/0"], allowOut: [X]` = only X); `allow_internet_access: false` denies everything except allowOut.
// What is blocked for every sandbox (the host, the sandbox pool, 0/8, 127/8, 169.254/16, 100.100.100.200,
// 168.63.129.16 but for DNS, multicast, reserved, the cluster's own addresses in `blocked_addrs`, and the
// operator's deny list below) stays blocked whatever allowOut says: those drops come first in `forward`.
//
// # Approval hold (network.approval, issue 28 part 3; approval_linux.go, nfqueue_linux.go)
//
// With Egress.Hold (a sandbox with an approval hook) its egress chain gets, after allowOut and the
// specific denyOut entries: accept `@ap_<veth>` (approved addresses), `reject with tcp reset` for
// `@apd_<veth>` (denied ones), accept established TCP, send new TCP to the xt NFQUEUE target
// (Config.ApprovalQueue, no bypass: fail closed), drop other TCP; then the catch-all denyOut
// entries, which still apply to UDP and ICMP. The manager reads the queue, asks Config.Approver
// (internal/approval's broker), adds the address to @ap or @apd with the answer's timeout and
// repeats the packet. Turning the hook off removes the rules and the sets; teardown too. A
// microVM's frames leave its namespace through the same veth (the TAP↔eth0 tc redirect is inside
// the namespace), so the same chain applies to them (not yet tested there). Root test
// `approval_linux_test.go` (queue 3301).
//
// The DNS hold (approval_dns_linux.go): with domain rules in play, a name the rules do not allow
// and no denyOut name names is held in the filter's Decide until the hook answers; allowed, the
// query is forwarded and its answers go to @ap_<veth> (max(TTL, MinLearnedTimeout) for "once", the
// remembered duration otherwise); denied, REFUSED. Root test `approval_dns_linux_test.go` (queue
// 3303, TestDomainEgress's stand-in resolver).
//
// With an egressProxy too (Egress.Relayed, relayhold_linux.go) the chain, reached from socks_pre,
// accepts the sandbox's TCP after allowOut and the specific denyOut entries instead, and the SOCKS
// relay holds the connection: Manager.ApproveRelayed asks the same broker before the CONNECT and the
// relay resets the connection on deny. Unit test `internal/socksrelay` TestRelayAsksApprove; e2e
// `test/gohttp/approval_egressproxy_test.go`.
//
// # Ended flows ("egress.end"; conntrack_linux.go)
//
// The manager turns on net.netfilter.nf_conntrack_acct and nf_conntrack_timestamp and listens for
// conntrack update and destroy events (github.com/ti-mo/conntrack). A flow whose original source is a
// guest address of the pool (not DNS redirected to the filter, not the volume server) ends when it is
// destroyed, or, for TCP, when it enters TIME_WAIT or CLOSE (its counters read with a Get; the later
// destroy skipped). Its counters go to the audit observer's EgressEnd (the activity feed). Bounded:
// a queue of 4096, dropping (FlowEndsDropped, /metrics airlock_egress_flow_ends_dropped_total) rather than blocking. Root test `conntrack_linux_test.go`
// (NFLOG group 3511).
//
// # Operator deny list (--deny-out, --deny-out-except; internal/network/denyout*.go)
//
// Private networks are closed to every sandbox by default: `airlock serve --deny-out` (default
// `10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,198.18.0.0/15`: RFC 1918, carrier-grade NAT — also
// where several Kubernetes CNIs and VPNs put pods —, and the benchmarking range) lists IPv4 ranges no
// sandbox reaches, so a sandbox with internet access on a company LAN or a Kubernetes node cannot reach
// the LAN's services, the pod and service networks, the database or other nodes' internal APIs.
// `--deny-out none` (or an empty value, `--deny-out=`) turns the list off; IPv6 entries are refused at start
// (no IPv6 is forwarded from sandboxes at all, see "Network"), as are bad CIDRs, naming the flag and entry.
// `--deny-out-except` carves ranges out of it for every sandbox (an internal package mirror); it only lifts
// the operator's deny, so each sandbox's own policy (internet switch, allowOut/denyOut) still decides there —
// it is not an allow rule, hence the name. The daemon warns at start about an exception outside every denied
// range or inside an always-blocked one (it changes nothing there).
//
//   - **Rules.** `forward` jumps, for IPv4 from sandbox veths, after the always-blocked drops and before
//     `egress_policy`, to the regular chain `deny_out`: `ip daddr <resolver> udp|tcp dport 53 return` for
//     each nameserver sandboxes get in `resolv.conf` (`sandbox.HostNameservers`: a VPC resolver, a home
//     router or the cluster DNS is usually private, and sandboxes without domain rules send DNS straight
//     to it), `ip daddr <exception> return`, then `ip daddr <range> drop` per range, each preceded by its
//     audit log rule. `return` goes back to `forward`, where the sandbox's policy decides. Without a list
//     the chain and the jump are not installed. The list is part of the table `NewManager` installs, so a
//     restart with other flags applies to running sandboxes at once.
//
//   - **allowOut cannot open it.** A create or `updateNetwork` whose allowOut lies in a denied range is
//     accepted (E2B apps keep working; the detail still shows the policy as asked), but the entry has no
//     effect there. When such a policy is set, the sandbox's egress audit log gets one entry per such
//     allowOut, `{kind: "policy", decision: "denied", rule: "allowOut 10.1.2.3 does not open operator deny
//     10.0.0.0/8"}` (`airlock net log <id>` shows it), and the daemon logs it; every attempt is then logged as
//     a denied connection with rule `operator deny 10.0.0.0/8`.
//
//   - **DNS.** Names are not filtered by the list: a name (from any resolver, or learned for a domain
//     allowOut) that resolves into a denied range resolves, and the connection is dropped by `deny_out`
//     like any other, with the same audit entry. The firewall is the one place that decides, whatever the
//     name said; the cluster DNS answering internal names therefore leaks names and addresses, not access.
//
//   - **Tests.** `internal/network/denyout_test.go` (flag parsing, defaults, conflicts), root test
//     `denyout_linux_test.go` (NFLOG group 40705, one namespace standing
//     in for a LAN host at 10.95.1.3, a mirror at 10.95.1.2 and a public address 203.0.113.2: defaults close
//     the LAN and keep the public address, the exception opens the mirror but not against the sandbox's
//     `denyOut 0.0.0.0/0` or internet off, allowOut cannot open the LAN, port 53 to the resolver passes, the
//     audit entries, rule order, `none`), `internal/daemon` and `internal/cli/serve_test.go` (bad values stop
//     `serve` at start), `test/e2e/egress.test.mjs` (npm `e2b`: a LAN server at `<ext>.66` unreachable by
//     default, with allowOut at create and live, and by a domain rule resolving to it; the audit entries) and
//     `test/e2e/microvm.test.mjs` (the same firewall in front of a microVM). The e2e daemons run with
//     `--deny-out-except <ext>.0/27` (`scripts/test.sh`) and `<ext>.16/29` (`scripts/test-microvm.sh`): the
//     suites' stand-in internet is itself private. The root tests of the other files carve their stand-in
//     outsides out the same way (`Config.DenyOutExcept`).
//
// Enforcement (`internal/network/egress_linux.go`): the table has a verdict map `egress_policy` (key: host
// veth name) and, per sandbox with a non-empty policy, a regular chain `eg_<hostveth>` holding one rule per
// entry — `ip daddr <allow> accept` first, then `ip daddr <deny> drop`, no final verdict. `forward` runs
// `iifname vmap @egress_policy` after the always-blocked drops and before the internet-set accept: a sandbox
// without an entry skips it; with one, its chain accepts (allowOut, final), drops (denyOut) or returns, and
// the internet set decides the rest. A policy change rebuilds the chain (flush + add) and points the map at
// it in one nftables batch, so there is no window with a half-applied policy; an empty policy removes the map
// element and the chain; teardown removes both. `forward` has no
// ct-state shortcut for packets leaving a sandbox, so every outbound packet, of new and existing connections
// alike, meets the current policy.
//
// Persistence: the lists are kept in the sandbox record's `Extra` JSON (`allowOut`, `denyOut`), the internet
// switch in `AllowInternet`. A daemon restart rebuilds the table from scratch (`NewManager`); `Restore`
// re-applies each re-attached sandbox's policy (running or paused) through `sandbox.PolicySetter`
// (`network.Manager.SetPolicy`). Fork children inherit the parent's policy. `GET /sandboxes/{id}` returns
// `allowInternetAccess` and `network: {allowOut, denyOut, allowPublicTraffic}`.
//
// Tests: `internal/network/egress_test.go` (parsing), `egress_linux_test.go` (rule building; a root test with
// an outside namespace with two addresses: allow one/deny rest,
// deny one, internet off + allowOut, allowOut 0.0.0.0/0 still cannot reach the host, clear, teardown),
// `internal/api/network_test.go`, `internal/sandbox/netpolicy_test.go` (restore re-applies),
// `test/gohttp/egress_test.go` (the rules, and the DNS filter of a domain rule, are back after a real daemon restart; PUT `{}` removes them) and
// `test/e2e/egress.test.mjs` (npm `e2b`, two servers in a namespace standing in for the internet).
// Every root test of this package (`*_linux_test.go`) takes a net prefix and a /24 fresh for each run
// (`runnames_linux_test.go`: "zt" + a random run tag + the test's two characters, a /24 of a /20 of
// 10.200.0.0/13 that no host route overlaps), so they run beside daemons and beside another run; their
// stand-in outside namespaces keep fixed "x…" names and ranges.
// Cost (`node bench/egress.mjs`, n=100, shared 2-core VM with other daemons' nftables traffic): PUT with
// 2 entries p50 16 ms / p99 650 ms, 64 entries p50 14 ms / p99 1.9 s, clear p50 24 ms / p99 93 ms, against
// the same run's baseline POST /timeout p50 0.7 ms / p99 14 ms. The p50 is the nftables batch (netlink
// commit, serialised per network namespace, shared with every other daemon on the host); the tail follows
// the other daemons' rule churn. Create pays it once when a policy is given.
package network
