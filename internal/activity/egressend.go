package activity

import (
	"github.com/airlock-sandbox/airlock/internal/audit"
)

// EgressEnd publishes sandbox id's ended flow f as "egress.end": protocol,
// ip, port, domain (the name the sandbox's DNS filter last answered with
// that address), bytesOut, bytesIn, packetsOut, packetsIn, and durationMs
// when known. It makes the Hub an audit.EndObserver.
func (h *Hub) EgressEnd(id string, f audit.FlowEnd) {
	if h == nil {
		return
	}
	data := map[string]any{"protocol": f.Protocol, "ip": f.Dst.String(),
		"bytesOut": f.BytesOut, "bytesIn": f.BytesIn, "packetsOut": f.PacketsOut, "packetsIn": f.PacketsIn}
	if f.Port != 0 {
		data["port"] = f.Port
	}
	if f.Duration > 0 {
		data["durationMs"] = f.Duration.Milliseconds()
	}
	if name := h.nameOf(id, f.Dst.String()); name != "" {
		data["domain"] = name
	}
	h.PublishAt(id, f.Time, "egress.end", data)
}

var _ audit.EndObserver = (*Hub)(nil)
