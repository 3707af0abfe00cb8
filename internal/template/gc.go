package template

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

// hashName matches template and layer directory names (sha256 hex).
var hashName = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Hold marks a build in progress until the returned func is called: GC does
// not run meanwhile, so the layers a build starts from (not yet referenced by
// any record) are kept. Builds of built-in recipes hold it themselves; the
// Dockerfile builder's caller must.
func (m *Manager) Hold() (release func()) {
	m.gcMu.RLock()
	return m.gcMu.RUnlock
}

// GC removes template and layer directories that no template record refers
// to (by hash or, for Dockerfile templates, in its layer list) and that are
// not in inUse (the hashes sandboxes run on). It does nothing and returns
// false while a build holds the store (Hold). Directories are first renamed
// to .trash-* so a crash half-way never leaves a partial template under its
// hash. It returns the removed hashes.
func (m *Manager) GC(ctx context.Context, inUse map[string]bool) ([]string, bool, error) {
	if !m.gcMu.TryLock() {
		return nil, false, nil
	}
	defer m.gcMu.Unlock()
	recs, err := m.st.ListTemplates(ctx)
	if err != nil {
		return nil, true, fmt.Errorf("listing templates: %w", err)
	}
	keep := map[string]bool{}
	for h := range inUse {
		keep[h] = true
	}
	for _, r := range recs {
		keep[r.Hash] = true
		var spec struct {
			Layers []string `json:"layers"`
		}
		if json.Unmarshal([]byte(r.Spec), &spec) == nil {
			for _, l := range spec.Layers {
				keep[l] = true
			}
		}
	}
	entries, err := os.ReadDir(m.dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, true, nil
		}
		return nil, true, fmt.Errorf("reading template dir: %w", err)
	}
	var removed []string
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !hashName.MatchString(name) || keep[name] {
			continue
		}
		trash := filepath.Join(m.dir, trashPrefix+randomSuffix())
		if err := os.Rename(m.hashDir(name), trash); err != nil {
			m.log.Warn("template gc: moving aside", "hash", name, "err", err)
			continue
		}
		if err := removeTree(trash); err != nil {
			m.log.Warn("template gc: removing", "path", trash, "err", err)
		}
		removed = append(removed, name)
	}
	if len(removed) > 0 {
		m.log.Info("template gc: removed unreferenced template directories", "count", len(removed))
	}
	return removed, true, nil
}
