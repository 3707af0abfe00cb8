// Package socksrelay tunnels a sandbox's TCP through its egressProxy, E2B's
// SOCKS5 upstream with RFC 1929 username/password auth (spec §11.1, issue
// 29), on the node rather than in the sandbox: the sandbox needs no proxy
// settings and cannot skip the proxy.
//
// The firewall (internal/network, socks_linux.go) DNATs every TCP
// connection a sandbox with an egressProxy opens, once its allow/deny
// policy has let it out, to the relay on the host side of the sandbox's
// veth. Relay.Serve accepts it, reads the original destination back
// (SO_ORIGINAL_DST), finds the sandbox's proxy by the connection's source
// address (Relay.Lookup), and opens the destination through the SOCKS5
// server with CONNECT: by the name the sandbox resolved for that address
// through the node's DNS filter when one is known (so the proxy sees names,
// as a socks5h client's would), else by the address. Then bytes are copied
// both ways as they come (io.Copy between TCP sockets: splice, no
// buffering), each direction's end passed on as a half-close.
//
// A SOCKS server that is down, refuses the credentials or the CONNECT gets
// the sandbox's connection reset: there is never a direct fallback (the
// firewall drops direct traffic from such a sandbox anyway).
//
// Dialer is the same SOCKS dial for the interception proxy
// (internal/egressproxy): a connection steered there for network.rules
// reaches its upstream through the sandbox's egressProxy too.
package socksrelay
