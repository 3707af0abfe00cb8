// Package dnsfilter is the resolver of sandboxes with domain rules: a DNS
// forwarder listening on the host side of each such sandbox's veth. Every
// query is checked against the sandbox's policy; allowed ones go to the
// upstream resolvers, and the A answers of names the policy allows are
// handed to a Learn callback (which opens them in the firewall) before the
// answer reaches the sandbox. Denied names get REFUSED.
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # Domain rules: the DNS filter (internal/dnsfilter, internal/network/dns_linux.go)
//
// Chosen over SNI/Host inspection in a transparent proxy: it works for every protocol (not only TLS and
// HTTP), needs no traffic through the daemon, and the kernel keeps enforcing addresses as it does for CIDRs.
//
//   - **Resolver.** A sandbox with domain rules has its veth in the set `dns_ifaces`. `prerouting` (nat, dstnat)
//     rewrites its UDP and TCP port-53 packets, to whatever address they were sent, to the host side of its own
//     /30 (`dnat ip to (saddr & 255.255.255.252) | 1 : 53`): the sandbox's `resolv.conf` needs no change, a live
//     PUT adding domain rules takes effect at once, and a program that asks another resolver (8.8.8.8) still
//     gets ours. `input`, which otherwise drops everything new from sandboxes, accepts exactly that: `iifname
//     @dns_ifaces`, dport 53, and `fib daddr . iif type local` — the destination is an address of the interface
//     the packet came in on, so a sandbox reaches neither another host service nor another sandbox's resolver.
//     The daemon (`dnsfilter.Filter`) listens on UDP and TCP `<host side>:53` per such sandbox (distinct
//     subnets keep two daemons apart) and answers only queries whose source is that sandbox's guest address
//     (strict rp_filter on the host veth rules out spoofing), everything else REFUSED.
//
//   - **Decision** (`Egress.DecideName`): a name matching an allowOut rule is forwarded and *learned*; allowOut
//     wins over denyOut, as for addresses. A name matching a denyOut rule is REFUSED. Any other name is REFUSED
//     when the policy lists allowOut names and denies the rest (`denyOut` has `0.0.0.0/0` or internet is off:
//     it could not be reached anyway, and the program learns so at once), else forwarded without learning
//     (the CIDR rules decide whether its addresses are reachable). Upstream: `airlock serve --dns-upstream`
//     (ip or ip:port, repeatable; default the IPv4 nameservers of the host's `/etc/resolv.conf`, loopback stub
//     resolvers included since the filter runs on the host), over UDP, again over TCP on truncation; no upstream
//     answering → SERVFAIL. At most 64 queries of one sandbox wait for an upstream at a time (more get SERVFAIL
//     at once), so a sandbox flooding its resolver cannot tie up the daemon.
//
//   - **Learning.** The A answers of a learned name are added, *before the answer is sent*, to the sandbox's own
//     set `dl_<hostveth>` (`ipv4_addr`, `flags timeout`) with timeout max(TTL, 5 min) (re-adding refreshes it);
//     the first rule of its `eg_<hostveth>` chain is `ip daddr @dl_<hostveth> accept`. The 5-minute floor
//     exists because `forward` checks every packet (no ct shortcut), so an address expiring mid-download
//     would cut the connection. If the set cannot be updated the query fails (SERVFAIL) rather than hand out an
//     address that would not work. A policy change flushes the set: what an old rule opened closes at once,
//     and names are learned again on their next lookup. Connections by IP to addresses not learned are
//     governed by the CIDR rules as before — with a domain allowlist and `denyOut: ["0.0.0.0/0"]` only the
//     resolved addresses are reachable.
//
//   - **Limits.** An address learned for an allowed name is open to any connection while learned (shared
//     hosting/CDN addresses open every site on them). A denyOut name only stops resolution through us: the
//     same server reached by IP or a name resolving to it is governed by the CIDR rules. IPv4 only (AAAA
//     queries are forwarded but nothing IPv6 is routed). Sandboxes without domain rules keep today's path: their
//     DNS goes straight to their `resolv.conf` nameservers under the CIDR rules, no filter runs.
//
//   - **Lifecycle.** `Setup` and `SetPolicy` start, re-configure (atomically swapped policy) or stop the
//     sandbox's resolver and the `dns_ifaces` element (resolver first, redirect second); `Teardown` stops it and
//     removes the set; a daemon restart re-applies the policy through `Restore` as for CIDRs.
//
//   - **Tests.** `internal/network/egress_test.go` (names, `DecideName`), `internal/dnsfilter/dnsfilter_test.go`
//     (loopback upstream: forward + learn, REFUSED, live swap, foreign client, SERVFAIL), root test
//     `internal/network/dns_linux_test.go` (prefix `aldn4t`, pool 10.96.4.0/24, an outside namespace with two
//     servers and a resolver: a query to any address reaches the filter, A reachable only after resolving
//     allowed.test, B refused and unreachable by address, wildcard, live change forgets learned addresses,
//     no policy → DNS goes where sent, teardown), and `test/e2e/egress.test.mjs` (npm `e2b`: a Node `dgram`
//     DNS server in the stand-in namespace at `<AIRLOCK_E2E_EXT_NET>.12`, the test daemon started with
//     `--dns-upstream` pointing at it; curl by name inside the sandbox).
//
//   - **Cost** (`go run ./bench/cmd/dnsfilter-bench -n 2000`, as root, all on loopback, shared 2-core VM at
//     load 12, two runs): baseline query straight to the resolver p50 41–43 µs / p99 95–140 µs; through the
//     filter, refused 27–38 µs / 81–82 µs, forwarded 75–77 µs / 407–475 µs, forwarded + learned (answer
//     written to an nftables timeout set before it is returned) 102–105 µs / 0.6–2.3 ms. A lookup of an
//     allowed name pays about 60 µs at the median plus the netlink commit in the tail; real upstreams take
//     milliseconds. Domain rules add nothing to packets: the kernel matches a set as for CIDRs.
package dnsfilter
