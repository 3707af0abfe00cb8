// Package guest is the host's side of the agent inside every sandbox
// (airlock-envd): the client the daemon, the runtimes, the CLI, the console
// and the benchmarks reach it with (health, /init, /freeze, the Process
// service's start stream, the code interpreter's /execute), and URL
// signing. The wire facts themselves (ports, paths, headers, auth, protocol
// version, the Process stream) are the public Go SDK's:
// sdk/go/airlock/agentwire and the generated sdk/go/airlock/proto; this
// package names them for the host. Host packages import this package and
// those, never the agent's own internal/envd.
package guest

import "github.com/airlock-sandbox/airlock/sdk/go/airlock/agentwire"

// Ports the agent listens on, on the guest's address.
const (
	EnvdPort        = agentwire.EnvdPort
	InterpreterPort = agentwire.InterpreterPort
)

// Version is the envd protocol version the agent reports (spec §1.6:
// ≥ 0.6.4) and the daemon hands out as envdVersion.
const Version = agentwire.Version

// Paths of the agent's HTTP endpoints.
const (
	PathHealth  = agentwire.PathHealth
	PathInit    = agentwire.PathInit
	PathFreeze  = agentwire.PathFreeze
	PathFiles   = agentwire.PathFiles
	PathExecute = agentwire.PathExecute
)

// Headers of the agent's protocol (see agentwire).
const (
	HeaderAccessToken  = agentwire.HeaderAccessToken
	HeaderHostTime     = agentwire.HeaderHostTime
	HeaderGuestAddr    = agentwire.HeaderGuestAddr
	HeaderGuestGateway = agentwire.HeaderGuestGateway
)

// BasicAuth is the Authorization header value that makes the agent run a
// process as user.
func BasicAuth(user string) string { return agentwire.BasicAuth(user) }

// URL is the address of path on the agent listening at host:port.
func URL(host string, port int, path string) string { return agentwire.URL(host, port, path) }
