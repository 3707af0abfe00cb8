package proxy

import (
	"net"
	"strconv"
	"strings"
)

// ParseSandboxHost parses a Host header of the form
// "<port>-<sandboxID>.<domain>[:listenport]". ok is false when host does not
// have that shape (it is then not sandbox traffic). When ok is true, id and
// port are exactly what the host names and still need validation: the id is
// the text between the first '-' and the first '.'.
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

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// parsePort validates a port string (1..65535).
func parsePort(s string) (int, bool) {
	if !allDigits(s) || len(s) > 5 {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, false
	}
	return n, true
}

// MaskPortPlaceholder stands for the sandbox port in a mask request host.
const MaskPortPlaceholder = "${PORT}"

// MaskedHost is the Host header a request to port of a sandbox whose
// network.maskRequestHost is mask carries: mask with every "${PORT}"
// replaced by the port ("" when mask is "": the Host is left as it is).
func MaskedHost(mask string, port int) string {
	if mask == "" {
		return ""
	}
	return strings.ReplaceAll(mask, MaskPortPlaceholder, strconv.Itoa(port))
}
