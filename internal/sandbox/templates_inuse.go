package sandbox

// TemplateHashes returns the template hashes (root filesystems) that the
// sandboxes this manager knows, running or paused, are built on; the
// template store must not remove them (template.Manager.GC).
func (m *Manager) TemplateHashes() map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]bool, len(m.sandboxes))
	for _, e := range m.sandboxes {
		e.mu.Lock()
		if e.rec.TemplateHash != "" {
			out[e.rec.TemplateHash] = true
		}
		e.mu.Unlock()
	}
	return out
}
