package wire

import (
	"net"
	"strconv"
	"strings"
)

// Header names that route sandbox traffic (matched case-insensitively).
const (
	HeaderSandboxID    = "E2b-Sandbox-Id"
	HeaderSandboxPort  = "E2b-Sandbox-Port"
	HeaderTrafficToken = "E2b-Traffic-Access-Token"
)

// ParseSandboxHost parses a Host header of the form
// "<port>-<sandboxID>.<domain>[:listenport]". ok is false when host does not
// have that shape (it is then not sandbox traffic). When ok is true, id and
// port are exactly what the host names and still need validation (ValidID,
// ParsePort): the id is the text between the first '-' and the first '.'.
func ParseSandboxHost(host string) (port, id string, ok bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, rest, hasDot := strings.Cut(host, ".")
	if !hasDot || rest == "" {
		return "", "", false
	}
	port, id, hasDash := strings.Cut(label, "-")
	if !hasDash || port == "" || !allDigits(port) {
		return "", "", false
	}
	return port, id, true
}

// ParsePort validates a sandbox port as a host or E2b-Sandbox-Port names
// it: decimal digits only, 1..65535.
func ParsePort(s string) (int, bool) {
	if !allDigits(s) || len(s) > 5 {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, false
	}
	return n, true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
