package sandbox

import (
	"net"
	"net/http"
	"strings"

	"golang.org/x/net/idna"
)

// ParseMaskRequestHost validates a create body's network.maskRequestHost as
// E2B's API does (400 otherwise): "host" or "host:port", where the port may
// be "${PORT}" (the proxy puts the sandbox port there), and the host must
// be ASCII and valid under IDNA's display profile (so "${PORT}" may not be
// part of the host name). "" (or no value) means no masking.
func ParseMaskRequestHost(mask string) (string, error) {
	if mask == "" {
		return "", nil
	}
	host, _, err := net.SplitHostPort(mask)
	if err != nil {
		if !strings.Contains(err.Error(), "missing port") {
			return "", userErrorf(http.StatusBadRequest, "mask request host is not valid: %s", mask)
		}
		host = mask
	}
	ascii, err := idna.Display.ToASCII(host)
	if err != nil {
		return "", userErrorf(http.StatusBadRequest, "mask request host is not valid: %s", mask)
	}
	if !strings.EqualFold(ascii, host) {
		return "", userErrorf(http.StatusBadRequest, "mask request host '%s' is not ASCII. Please use ASCII characters only.", host)
	}
	// Go's HTTP client refuses to send a Host header with control
	// characters or spaces; the port part is free text to E2B, so refuse
	// here what would break every request later.
	if strings.ContainsAny(mask, " \t\r\n/\\@?#") {
		return "", userErrorf(http.StatusBadRequest, "mask request host is not valid: %s", mask)
	}
	return mask, nil
}
