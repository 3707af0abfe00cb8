package activity

import (
	"github.com/airlock-sandbox/airlock/internal/audit"
)

// Egress turns sandbox id's egress audit entry e into a feed entry:
// "egress.connect" for a connection attempt (with "domain", the name the
// sandbox's DNS filter last answered with that address, when it did), and
// "egress.dns" for a DNS decision. It is the network manager's
// audit.Observer.
func (h *Hub) Egress(id string, e audit.Entry) {
	if h == nil {
		return
	}
	switch e.Kind {
	case audit.KindConn:
		data := map[string]any{"protocol": e.Protocol, "ip": e.Dst.String(), "verdict": e.Decision, "rule": e.Rule}
		if e.Port != 0 {
			data["port"] = e.Port
		}
		if name := h.nameOf(id, e.Dst.String()); name != "" {
			data["domain"] = name
		}
		h.PublishAt(id, e.Time, "egress.connect", data)
	case audit.KindDNS:
		answers := make([]string, 0, len(e.Answers))
		for _, a := range e.Answers {
			answers = append(answers, a.String())
		}
		if e.Decision == audit.Allowed && len(answers) > 0 {
			h.remember(id, e.Name, answers)
		}
		h.PublishAt(id, e.Time, "egress.dns", map[string]any{"name": e.Name, "qtype": e.QType,
			"answers": answers, "verdict": e.Decision, "rule": e.Rule})
	}
}

// remember notes that name resolved to addrs for sandbox id.
func (h *Hub) remember(id, name string, addrs []string) {
	f := h.feed(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.names == nil || len(f.names)+len(addrs) > maxNames {
		f.names = map[string]string{}
	}
	for _, a := range addrs {
		f.names[a] = name
	}
}

// nameOf is the domain sandbox id last resolved to addr ("" if none).
func (h *Hub) nameOf(id, addr string) string {
	f := h.feed(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.names[addr]
}
