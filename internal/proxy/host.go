package proxy

import (
	"strconv"
	"strings"
)

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
