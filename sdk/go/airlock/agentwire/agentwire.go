// Package agentwire holds the wire facts of airlock-envd, the agent inside
// every sandbox: its ports, protocol version, HTTP paths and headers, its
// Basic auth, and the reading of a Process stream. The generated Connect
// packages of its services are in ../proto. Both are public so that a
// program outside the Airlock module can build the requests that
// Client.Process and Client.Filesystem take; the daemon's side
// (internal/guest) and the agent itself import them from here.
package agentwire

import (
	"encoding/base64"
	"net"
	"strconv"
)

// Ports the agent listens on, on the guest's address.
const (
	// EnvdPort serves the Connect services (process, filesystem), /files,
	// /health, /envs, /init, /freeze and /metrics.
	EnvdPort = 49983
	// InterpreterPort serves the code interpreter (templates with
	// ipykernel): /health, /execute, /contexts.
	InterpreterPort = 49999
)

// Version is the envd protocol version the agent reports (E2B: ≥ 0.6.4)
// and the daemon hands out as envdVersion.
const Version = "0.6.13"

// Paths of the agent's HTTP endpoints.
const (
	PathHealth  = "/health"
	PathInit    = "/init"
	PathFreeze  = "/freeze"
	PathFiles   = "/files"
	PathExecute = "/execute"
)

// Headers of the agent's protocol.
const (
	// HeaderAccessToken carries the sandbox's envdAccessToken.
	HeaderAccessToken = "X-Access-Token"
	// HeaderHostTime carries the host's time (RFC 3339) on the daemon's
	// POST /freeze after a microVM restore; the agent sets the guest clock.
	HeaderHostTime = "X-Airlock-Host-Time"
	// HeaderGuestAddr and HeaderGuestGateway carry a cloned microVM's new
	// address (prefix) and gateway on that POST /freeze.
	HeaderGuestAddr    = "X-Airlock-Guest-Addr"
	HeaderGuestGateway = "X-Airlock-Guest-Gateway"
)

// BasicAuth is the Authorization header value that makes the agent run a
// process as user (E2B: Basic auth with the user name and no password).
func BasicAuth(user string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"))
}

// URL is the address of path on the agent listening at host:port.
func URL(host string, port int, path string) string {
	return "http://" + net.JoinHostPort(host, strconv.Itoa(port)) + path
}
