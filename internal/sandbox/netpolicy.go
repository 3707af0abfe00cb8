package sandbox

import (
	"context"
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// PolicySetter is implemented by networks that can change a live sandbox's
// egress policy (network.Manager.SetPolicy). Create, fork and re-attach
// after a daemon restart use it too, since a restart rebuilds the firewall.
type PolicySetter interface {
	SetPolicy(ctx context.Context, id string, slot int, opts network.Options) error
}

// ParseEgress validates allowOut/denyOut as a 400 user error.
func ParseEgress(allowOut, denyOut []string) (network.Egress, error) {
	e, err := network.ParseEgress(allowOut, denyOut)
	if err != nil {
		return network.Egress{}, userErrorf(http.StatusBadRequest, "invalid network rule: %v", err)
	}
	return e, nil
}

// egressOf decodes the policy kept in a record's Extra (entries were
// validated when stored).
func egressOf(x extra) network.Egress {
	e, _ := network.ParseEgress(x.AllowOut, x.DenyOut)
	e.Hold = x.Approval != nil
	return e
}

// reapplyPolicy restores a re-attached sandbox's egress policy after a
// daemon restart (NewManager rebuilt the firewall without it).
func (m *Manager) reapplyPolicy(ctx context.Context, rec *store.Sandbox) {
	x := decodeExtra(rec.Extra)
	eg := egressOf(x)
	if eg.Empty() && len(x.NetworkRules) == 0 && x.EgressProxy == nil {
		return
	}
	ps, ok := m.cfg.Network.(PolicySetter)
	if !ok {
		return
	}
	if err := ps.SetPolicy(ctx, rec.ID, rec.Slot, netOptions(rec.AllowInternet, eg, x.NetworkRules, x.EgressProxy)); err != nil {
		m.log.Error("re-applying the network policy", "sandbox", rec.ID, "err", err)
	}
}

// parentEgress is the policy a fork child inherits.
func parentEgress(parent *store.Sandbox) network.Egress {
	return egressOf(decodeExtra(parent.Extra))
}

// EgressLogger is implemented by networks that keep an egress audit log
// (network.Manager).
type EgressLogger interface {
	EgressLog(id string, limit int) []audit.Entry
}
