// Package proxy routes sandbox traffic arriving on the daemon's single
// listener: requests naming a sandbox (E2b-Sandbox-Id/E2b-Sandbox-Port
// headers, a "<port>-<id>.<domain>" Host, or a signed header-less /files URL)
// are reverse-proxied, unbuffered, to the sandbox's guest address; everything
// else goes to the control-plane API.
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # Public ports
//
// Any port a process inside the sandbox listens on (on the guest address or `0.0.0.0`) is
// reachable through the daemon's listener: header routing (`E2b-Sandbox-Id` + `E2b-Sandbox-Port`)
// or host routing (`Host: <port>-<id>.<anything>`, which is what `sbx.getHost(port)` gives; with
// `--domain` the SDKs get that domain back). Create with `network.allowPublicTraffic: false` and
// the daemon generates a `trafficAccessToken` (returned on create/connect, kept in the store);
// the proxy then answers 403 on every port but envd's (49983) unless the request carries
// `E2b-Traffic-Access-Token` — the interpreter's 49999 included (`@e2b/code-interpreter` sends it
// on `/execute` and `/contexts`). A fork child of a private sandbox, and a create from a named
// snapshot with `allowPublicTraffic: false`, get a traffic token of their own (returned in the fork
// and create responses; GET detail reports `allowPublicTraffic: false`). The proxy never passes the
// client's API key to sandbox code: an `X-API-Key` or `Authorization` header that carries the
// daemon's key (bare, `Bearer <key>`, or in Basic credentials) is removed; other values (an app's
// own key, HTTP authentication, envd's `Authorization: Basic <user>:`) pass (`internal/proxy/keyheaders.go`).
// A redirect from sandbox code goes back to the client as it is; the daemon's own agent client
// (`guest.Client`) never follows one either (`guest.NoRedirect`). A closed port is a 502 like an unknown sandbox. Whenever a sandbox
// is removed the daemon drops the proxy's idle upstream connections: the removed namespace never
// closes them, and a new sandbox given the same address would answer a reused one with a reset.
// `network.maskRequestHost` (create only, validated as E2B does: `host` or `host:port`, the port may be
// `${PORT}`, the host ASCII under IDNA) is kept in the sandbox record (pause, resume, fork, restart) and
// becomes the Host header of every request the proxy forwards to the sandbox, `${PORT}` replaced by the
// port; without it the sandbox sees its own address.
// `network.allowOut`/`denyOut` (egress lists) are enforced: see "Egress policy".
package proxy
