package sandbox

import (
	"context"
	"fmt"
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// Templates as the manager sees them: what a resolved template is, and the
// template a running sandbox stands on.

// Template is what the manager needs to know about a resolved template.
type Template struct {
	Name   string // name/alias as requested, e.g. "base"
	Hash   string // content hash of the build
	RootFS string // read-only root filesystem directory
	// TemplateConfig holds the optional defaults of custom (Dockerfile)
	// templates: environment, user, workdir, resources, start and ready.
	TemplateConfig
}

// Templates resolves template names. Unknown names must return an error
// wrapping ErrTemplateNotFound.
type Templates interface {
	Resolve(ctx context.Context, name string) (*Template, error)
}

// templateOf resolves the template a sandbox runs on (for a sandbox created
// from a snapshot, the template under the snapshot).
func (m *Manager) templateOf(ctx context.Context, rec *store.Sandbox) (*Template, error) {
	name := rec.TemplateID
	if base := decodeExtra(rec.Extra).BaseTemplate; base != "" {
		name = base
	}
	return m.cfg.Templates.Resolve(ctx, name)
}

// unchangedTemplate is templateOf(rec), or a 409 when the template was
// rebuilt since the sandbox was created (verbed says what the sandbox then
// cannot be: "forked", "snapshotted").
func (m *Manager) unchangedTemplate(ctx context.Context, rec *store.Sandbox, verbed string) (*Template, error) {
	tpl, err := m.templateOf(ctx, rec)
	if err != nil {
		return nil, fmt.Errorf("resolving template %q of %s: %w", rec.TemplateID, rec.ID, err)
	}
	if tpl.Hash != rec.TemplateHash {
		return nil, userErrorf(http.StatusConflict, "template %q was rebuilt since sandbox %q was created; it cannot be %s", rec.TemplateID, rec.ID, verbed)
	}
	return tpl, nil
}
