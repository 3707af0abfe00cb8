package activity

import (
	"net/netip"

	"github.com/airlock-sandbox/airlock/internal/approval"
)

// Approval publishes an egress approval decision of sandbox id as an
// "egress.approval" entry: destination, domain, decision, by whom
// (webhook, stream, timeout, remembered) and the wait in ms.
func (h *Hub) Approval(id string, a approval.Answer) {
	if h == nil {
		return
	}
	q := a.Question
	decision := "deny"
	if a.Allow {
		decision = "allow"
	}
	data := map[string]any{"protocol": q.Protocol, "ip": q.Address, "port": q.Port, "decision": decision,
		"by": a.By, "waitMs": a.Wait.Milliseconds()}
	if q.DecisionID != "" {
		data["decisionId"] = q.DecisionID
	}
	if q.Domain != "" {
		data["domain"] = q.Domain
	}
	switch {
	case a.For < 0:
		data["remember"] = approval.RememberSandbox
	case a.For > 0:
		data["remember"] = a.For.String()
	}
	h.Publish(id, "egress.approval", data)
}

// DomainOf is the domain sandbox id last resolved to a through its DNS
// filter ("" if none): the approval question's domain.
func (h *Hub) DomainOf(id string, a netip.Addr) string {
	if h == nil {
		return ""
	}
	return h.nameOf(id, a.String())
}
