package template

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// Layers: the Dockerfile builder (internal/imagebuild) stores every layer
// as a complete root filesystem under <hash>/rootfs with a meta.json, the
// same layout as recipe templates, so that any layer can back a sandbox
// and a template is simply a name recorded for its last layer.

// Dir is the directory holding all template and layer directories; build
// scratch directories must be created in it (prefix ".tmp-") so that they
// can be renamed into place and are cleaned up after a crash.
func (m *Manager) Dir() string {
	_ = os.MkdirAll(m.dir, 0o755)
	return m.dir
}

// LayerPath returns the root filesystem of the layer or template hash.
func (m *Manager) LayerPath(hash string) (string, bool) {
	if !m.present(hash) {
		return "", false
	}
	return m.rootFS(hash), true
}

// PublishLayer writes meta.json into the scratch directory tmp (which holds
// rootfs/) and renames it to <hash>. When another build published the
// same hash first, tmp is discarded.
func (m *Manager) PublishLayer(tmp, hash string, size int64, spec string) error {
	meta := &templateMeta{Name: "layer", Hash: hash, SizeBytes: size, CreatedAt: time.Now().UTC(), Spec: spec}
	b, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding layer metadata: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, metaFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing layer metadata: %w", err)
	}
	if err := os.Rename(tmp, m.hashDir(hash)); err != nil {
		if m.present(hash) {
			return removeTree(tmp)
		}
		return fmt.Errorf("publishing layer: %w", err)
	}
	return nil
}

// Register records name for the existing layer hash with spec (replacing
// an earlier record of name), after pushing the layer to the artifact store
// (SetArtifacts) unless it is there.
func (m *Manager) Register(ctx context.Context, name, hash, spec string) (*Template, error) {
	if !m.present(hash) {
		return nil, fmt.Errorf("%w: layer %s", ErrNotFound, hash)
	}
	size, err := treeSize(m.rootFS(hash))
	if err != nil {
		return nil, fmt.Errorf("measuring template %q: %w", name, err)
	}
	d, err := m.push(ctx, hash, m.knownDigest(ctx, name, hash))
	if err != nil {
		return nil, err
	}
	rec := &store.Template{Name: name, Hash: hash, SizeBytes: size, CreatedAt: time.Now().UTC(), Spec: spec, ArtifactDigest: string(d)}
	if err := m.st.PutTemplate(ctx, rec); err != nil {
		return nil, fmt.Errorf("recording template %q: %w", name, err)
	}
	return m.fromRecord(rec), nil
}

// Remove deletes the record of name. Layer directories stay (they are the
// build cache and may back other templates).
func (m *Manager) Remove(ctx context.Context, name string) error {
	if _, err := LookupRecipe(name); err == nil {
		return fmt.Errorf("%w: %q is a built-in template", ErrBuiltin, name)
	}
	if err := m.st.DeleteTemplate(ctx, name); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: %q", ErrNotFound, name)
		}
		return fmt.Errorf("deleting template %q: %w", name, err)
	}
	return nil
}

// ErrBuiltin is returned when removing a built-in template.
var ErrBuiltin = errors.New("cannot remove a built-in template")
