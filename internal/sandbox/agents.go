package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// AgentsInUse lists the agent binaries that something restorable refers
// to: the current one, every sandbox's (running or paused), every named
// snapshot's and every boot snapshot's. The caller (serve) removes the
// other installed agents (agentbin.GC) after Restore and InitSnapshots.
func (m *Manager) AgentsInUse(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	add(m.cfg.AgentPath)
	rows, err := m.cfg.Store.ListSandboxes(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	for _, r := range rows {
		add(decodeExtra(r.Extra).Agent)
	}
	if ss, err := m.snapshotStore(); err == nil {
		snaps, err := ss.ListSnapshots(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing snapshots: %w", err)
		}
		for _, s := range snaps {
			if sp, err := decodeSnapshotSpec(s.Spec); err == nil {
				add(sp.AgentPath)
			}
		}
	}
	ents, err := os.ReadDir(m.snapshotsDir())
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("listing boot snapshots: %w", err)
	}
	for _, de := range ents {
		if !strings.HasPrefix(de.Name(), bootPrefix) || !strings.HasSuffix(de.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.snapshotsDir(), de.Name()))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", de.Name(), err)
		}
		var bf bootFile
		if json.Unmarshal(b, &bf) == nil {
			add(bf.Spec.AgentPath)
		}
	}
	return out, nil
}

// agentOf is the agent binary the sandbox rec (or the sandbox a snapshot
// was taken of) runs and must be restored with: the one recorded at its
// create, or the current one for records from before agents were recorded.
func (m *Manager) agentOf(rec *store.Sandbox) (string, error) {
	a := decodeExtra(rec.Extra).Agent
	if a == "" || a == m.cfg.AgentPath {
		return m.cfg.AgentPath, nil
	}
	// The same build in this node's agents directory (a sandbox or snapshot
	// another node recorded: one directory per content hash).
	if here := m.agentHere(a); here != "" {
		if _, err := os.Stat(here); err == nil {
			return here, nil
		}
	}
	if _, err := os.Stat(a); err != nil {
		return "", fmt.Errorf("the agent binary the saved sandbox ran is gone; it cannot be restored: %w", err)
	}
	return a, nil
}
