// Package egressproxy is issue 29's interception proxy: E2B's network
// rules (spec §11.1-11.2: per-domain header transforms with
// ${e2b.secrets.<name>} placeholders, plus Airlock's method/path matchers
// and query transforms) applied on the node, outside the sandbox, so that
// the sandbox never holds the secret.
//
// An intercepted request's flow: the sandbox connects to a ruled domain's
// address; the node steers the connection to the proxy (HandleConn, with
// the original destination and the sandbox's rules); the proxy peeks the
// TLS ClientHello. A connection whose SNI is not a ruled domain, or that is
// not TLS (plain HTTP: no downgrade), is relayed byte for byte, untouched.
// For a ruled SNI the proxy first dials the original destination and
// completes a VERIFIED TLS handshake with it for that same name (system
// roots, or RootCAs), and only then finishes the sandbox's handshake with a
// leaf for the name signed by the node CA, offering HTTP/1.1 only (no h2,
// hence no :authority to disagree). A bad upstream certificate therefore
// fails the sandbox's own handshake before any request exists. Each
// request is parsed and re-serialised (no smuggling through framing
// differences); one whose Host is not the TLS name gets 421 and nothing
// goes upstream; the matching rules' placeholders are filled from
// secrets.Service.Resolve in memory, and the request is written upstream.
// An Expect: 100-continue is answered by the proxy (the body is then
// read and sent upstream without it), and 1xx answers are passed on until
// the final one. Responses (redirects included: never followed) are
// relayed as they come, without buffering; a 101 becomes a raw two-way
// relay (WebSocket). A secret that cannot be resolved fails the request
// (502) instead of sending it without. Logs and errors name secrets,
// never values.
//
// Reuse (pool.go): the upstream leg of a new sandbox connection is the
// costly part (a TCP dial, then a full verified TLS handshake: the
// certificate chain check and a signature verify, serial with the
// sandbox's own handshake). So a verified upstream connection left at a
// clean request boundary when its sandbox connection ends (the sandbox
// closed between requests, or asked Connection: close, which then closes
// only its side) is kept idle, and the next connection of the SAME
// sandbox to the same original destination, TLS name and route (its
// egressProxy, Target.Route) takes it instead of dialling; it is checked
// alive (nothing unasked buffered, no EOF) first. Never across sandboxes:
// a connection that carried one sandbox's secrets is not handed to
// another, even for the same name. Bounds: DefaultIdleTimeout (30 s,
// then closed), DefaultMaxIdlePerKey (4), DefaultMaxIdle (256 per node);
// a negative IdleTimeout turns reuse off. If the server closed an idle
// connection just as it is reused and none of the answer came, a request
// without a body is sent again on a new verified connection; one with a
// body gets 502 (it may have been acted on). Fresh upstream handshakes
// resume a TLS session from a per-sandbox-and-route cache (32 sessions
// each, dropped 10 min after last use, at most 4096 sandboxes); Go checks
// on resumption that the session's certificate was verified for this
// name and has not expired, and the server must still prove it holds the
// ticket key. Sessions are not shared between sandboxes either (a ticket
// would let the server link them). Leaf certificates (ECDSA P-256) are
// made once per name, not per connection: CA.Leaf caches them, at most
// MaxLeaves, each replaced an hour before it ends; the cache belongs to
// the CA, so a new CA starts empty. Once the sandbox's handshake is done
// its last segment is ACKed at once (TCP_QUICKACK, quickack_linux.go):
// the proxy has nothing else to send then, and a client with Nagle on
// would otherwise hold its request for the kernel's 40 ms delayed ACK.
//
// The CA is per node, made at daemon start and held only in its memory:
// its key never enters a sandbox, so a per-sandbox CA would add key
// generation to every create and protect nothing more (a sandbox trusting
// the node's CA already trusts the node). Rotation is a daemon restart: a
// new CA (valid CAValidity) is installed into each sandbox at its next
// start or resume, which is also why the agent installs it then.
package egressproxy
