package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// Restore from a named snapshot: the create's templateID names a snapshot
// (snapshot.go captures them). The snapshot is checked against this
// daemon's runtime and the template under it, held against deletion, and
// restored like a boot snapshot (create_restore.go).

// createFromSnapshot is Create for a templateID that names a snapshot: a
// sandbox restored from the saved image and layer, with a fresh id,
// token, address, env vars and clock.
func (m *Manager) createFromSnapshot(ctx context.Context, snap *store.Snapshot, req CreateRequest, allowInternet bool) (*Sandbox, error) {
	sp, err := decodeSnapshotSpec(snap.Spec)
	if err != nil {
		return nil, err
	}
	if sp.Runtime != m.cfg.Runtime.Name() {
		return nil, userErrorf(http.StatusConflict, "snapshot %q was taken with the %q runtime, this daemon runs %q", snap.ID, sp.Runtime, m.cfg.Runtime.Name())
	}
	if sp.RuntimeBuild != "" && sp.RuntimeBuild != m.runtimeBuild() {
		return nil, userErrorf(http.StatusConflict, "snapshot %q was saved by another build of the %s runtime (%s; this daemon runs %s) and cannot be restored", snap.ID, sp.Runtime, sp.RuntimeBuild, m.runtimeBuild())
	}
	tpl, err := m.cfg.Templates.Resolve(ctx, sp.TemplateID)
	if errors.Is(err, ErrTemplateNotFound) || (err == nil && tpl.Hash != sp.TemplateHash) {
		return nil, userErrorf(http.StatusConflict, "template %q under snapshot %q was removed or rebuilt; the snapshot cannot be used", sp.TemplateID, snap.ID)
	}
	if err != nil {
		return nil, fmt.Errorf("resolving template %q of snapshot %s: %w", sp.TemplateID, snap.ID, err)
	}
	release, err := m.snaps.acquire(snap.ID)
	if err != nil {
		return nil, err
	}
	defer release()
	if len(req.VolumeMounts) > 0 && !slices.Equal(req.VolumeMounts, sp.Volumes) {
		return nil, userErrorf(http.StatusBadRequest, "a sandbox created from snapshot %q mounts the snapshot's volumes; volumeMounts cannot change them", snap.ID)
	}
	x := newExtra(req)
	x.Volumes = sp.Volumes
	x.BaseTemplate = sp.TemplateID
	dir := m.snapshotDir(snap.ID)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) && m.cfg.Node != nil {
		// Made on another node: fetched from the artifact store for this
		// create.
		parent, err := tempIn(m.importsDir(), snap.ID+"-")
		if err != nil {
			return nil, fmt.Errorf("making the import directory: %w", err)
		}
		defer os.RemoveAll(parent)
		dir = filepath.Join(parent, "snapshot")
		start := time.Now()
		if err := m.cfg.Node.FetchSnapshot(ctx, snap.ID, sp.ImageDigest, dir); err != nil {
			return nil, m.storeError(fmt.Sprintf("fetching snapshot %s from the artifact store", snap.ID), err)
		}
		agent, err := m.localAgent(ctx, sp.AgentPath, sp.AgentBlob)
		if err != nil {
			return nil, m.storeError(fmt.Sprintf("creating from snapshot %s", snap.ID), err)
		}
		if agent == "" {
			return nil, userErrorf(http.StatusConflict, "snapshot %q runs an agent build node %s does not have", snap.ID, m.cfg.NodeID)
		}
		sp.AgentPath = agent
		m.log.Info("snapshot fetched from the artifact store", "snapshot", snap.ID, "elapsed", time.Since(start))
	}
	return m.restoreFrom(ctx, restoreSource{dir: dir, spec: sp, tpl: tpl,
		templateID: snap.ID, alias: snap.Name, extra: x, what: "snapshot " + snap.ID, kind: kindSnapshot}, req, allowInternet)
}
