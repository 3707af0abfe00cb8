package sandbox

import (
	"context"
	"time"

	"github.com/airlock-sandbox/airlock/internal/approval"
)

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

// ApprovalMemos returns the remembered answers of sandbox id's approval
// hook (approval.Broker's Memos).
func (m *Manager) ApprovalMemos(id string) []approval.Memo {
	e, err := m.Lookup(id)
	if err != nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return decodeExtra(e.rec.Extra).ApprovalMemo
}

// maxApprovalMemos bounds the remembered answers kept with a sandbox.
const maxApprovalMemos = 1024

// RememberApproval keeps a remembered answer with sandbox id's record
// (replacing one for the same destination), so a daemon restart keeps it
// (approval.Broker's Persist).
func (m *Manager) RememberApproval(id string, memo approval.Memo) {
	e, err := m.Lookup(id)
	if err != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return
	}
	x := decodeExtra(e.rec.Extra)
	now := time.Now()
	kept := x.ApprovalMemo[:0]
	for _, k := range x.ApprovalMemo {
		if k.Key != memo.Key && (k.Until.IsZero() || now.Before(k.Until)) {
			kept = append(kept, k)
		}
	}
	x.ApprovalMemo = append(kept, memo)
	if len(x.ApprovalMemo) > maxApprovalMemos {
		x.ApprovalMemo = x.ApprovalMemo[len(x.ApprovalMemo)-maxApprovalMemos:]
	}
	e.rec.Extra = encodeExtra(x)
	rec := e.rec
	if err := m.cfg.Store.PutSandbox(context.Background(), &rec); err != nil {
		m.log.Warn("keeping a remembered approval", "sandbox", id, "err", err)
	}
}
