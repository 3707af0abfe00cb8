package sandbox

import (
	"context"
	"fmt"
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
	return e
}

// SetNetwork replaces the sandbox's egress policy live: internet access plus
// allowOut/denyOut (omitted lists are cleared). The policy is persisted so
// a daemon restart re-applies it.
func (m *Manager) SetNetwork(ctx context.Context, id string, allowInternet bool, eg network.Egress) error {
	ps, ok := m.cfg.Network.(PolicySetter)
	if !ok {
		return userErrorf(http.StatusNotImplemented, "this network cannot change egress policies")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.sandboxes[id]
	if !ok {
		return m.notFound(id)
	}
	if e.op != "" {
		return userErrorf(http.StatusConflict, "sandbox %q is %s; try again", id, e.op)
	}
	if err := ps.SetPolicy(ctx, id, e.rec.Slot, network.Options{AllowInternet: allowInternet, Egress: eg}); err != nil {
		return fmt.Errorf("applying the network policy of %s: %w", id, err)
	}
	x := decodeExtra(e.rec.Extra)
	x.AllowOut, x.DenyOut = eg.Strings()
	e.rec.Extra = encodeExtra(x)
	e.rec.AllowInternet = allowInternet
	rec := e.rec
	if err := m.cfg.Store.PutSandbox(ctx, &rec); err != nil {
		return fmt.Errorf("saving the network policy of %s: %w", id, err)
	}
	m.log.Info("sandbox network policy changed", "sandbox", id, "internet", allowInternet,
		"allow_out", len(eg.Allow), "deny_out", len(eg.Deny))
	return nil
}

// reapplyPolicy restores a re-attached sandbox's egress policy after a
// daemon restart (NewManager rebuilt the firewall without it).
func (m *Manager) reapplyPolicy(ctx context.Context, rec *store.Sandbox) {
	eg := egressOf(decodeExtra(rec.Extra))
	if eg.Empty() {
		return
	}
	ps, ok := m.cfg.Network.(PolicySetter)
	if !ok {
		return
	}
	if err := ps.SetPolicy(ctx, rec.ID, rec.Slot, network.Options{AllowInternet: rec.AllowInternet, Egress: eg}); err != nil {
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

// EgressDropped is how many of the sandbox's oldest egress audit entries
// are no longer kept (0 when the network keeps no count).
func (m *Manager) EgressDropped(id string) uint64 {
	if d, ok := m.cfg.Network.(interface{ EgressDropped(id string) uint64 }); ok {
		return d.EgressDropped(id)
	}
	return 0
}

// EgressLog returns up to limit (all when <= 0) of the sandbox's most
// recent outbound connection attempts and DNS decisions, oldest first.
func (m *Manager) EgressLog(id string, limit int) ([]audit.Entry, error) {
	el, ok := m.cfg.Network.(EgressLogger)
	if !ok {
		return nil, userErrorf(http.StatusNotImplemented, "this network keeps no egress audit log")
	}
	m.mu.Lock()
	_, ok = m.sandboxes[id]
	m.mu.Unlock()
	if !ok {
		return nil, m.notFound(id)
	}
	entries := el.EgressLog(id, limit)
	if entries == nil {
		entries = []audit.Entry{}
	}
	return entries, nil
}
