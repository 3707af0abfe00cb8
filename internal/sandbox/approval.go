package sandbox

import "github.com/airlock-sandbox/airlock/internal/approval"

// ApprovalHook returns the approval hook (network.approval) of live
// sandbox id, with its webhook secret, or nil (approval.Broker's HookOf).
func (m *Manager) ApprovalHook(id string) *approval.Config {
	e, err := m.Lookup(id)
	if err != nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return decodeExtra(e.rec.Extra).Approval.Clone()
}
