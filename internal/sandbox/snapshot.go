package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/airlock-sandbox/airlock/internal/volume"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Named snapshots: a running sandbox is frozen and checkpointed like a fork
// parent, its memory image and a copy of its writable layer are kept under
// <data>/snapshots/<id>/ (with a manifest hashing every file), and the
// sandbox is restored and keeps running. Creating a sandbox with the
// snapshot's id or name as templateID restores a copy of it with a fresh
// identity (the restore path, create_restore.go).

// snapshotCheckpoint is the memory image's directory inside a snapshot dir.
const snapshotCheckpoint = "checkpoint"

// snapshotNamePattern restricts names to what is safe as a template name.
var snapshotNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// SnapshotInfo describes one named snapshot.
type SnapshotInfo struct {
	ID         string
	Name       string // "" when unnamed
	SandboxID  string // the sandbox it was taken from
	TemplateID string // the template under it
	SizeBytes  int64  // disk used
	CreatedAt  time.Time
	// Problem is set when the snapshot failed verification at startup; it
	// cannot be used, only deleted.
	Problem string
}

// Names returns the snapshot's names (E2B's names[]).
func (s *SnapshotInfo) Names() []string {
	if s.Name == "" {
		return []string{}
	}
	return []string{s.Name}
}

// snapshotSpec is store.Snapshot.Spec: what a create from the snapshot needs.
type snapshotSpec struct {
	TemplateID   string            `json:"templateID"`
	TemplateHash string            `json:"templateHash"`
	Runtime      string            `json:"runtime"`
	AccessToken  string            `json:"accessToken,omitempty"` // the token the saved agent knows
	EnvVars      map[string]string `json:"envVars,omitempty"`
	CPUCount     int               `json:"cpuCount"`
	MemoryMB     int               `json:"memoryMB"`
	DiskSizeMB   int               `json:"diskSizeMB"`
	// AgentPath is the agent binary the saved sandbox ran (agentbin); ""
	// in snapshots from before it was kept.
	AgentPath string `json:"agentPath,omitempty"`
	// AgentBlob is that binary in the artifact store (cluster nodes), for
	// a node that restores the image and lacks the build.
	AgentBlob string `json:"agentBlob,omitempty"`
	// RuntimeBuild is the runtime build that saved the memory image
	// (runtime.ImageBuilder); "" for runtimes without one and in snapshots
	// from before it was kept.
	RuntimeBuild string `json:"runtimeBuild,omitempty"`
	// ImageDigest is the digest of the snapshot's image in the artifact
	// store (cluster nodes: NodeHooks.StoreSnapshot), which a node that fetches it
	// checks; the row, not the store, is what says what the snapshot is.
	ImageDigest string `json:"imageDigest,omitempty"`
	// Volumes are the saved sandbox's volume mounts: its memory image
	// holds them, so every sandbox created from it mounts them too.
	Volumes []volume.Mount `json:"volumes,omitempty"`
}

// runtimeBuild is the runtime's image build (runtime.ImageBuilder), or "".
func (m *Manager) runtimeBuild() string {
	if ib := m.caps.ImageBuilder; ib != nil {
		return ib.ImageBuild()
	}
	return ""
}

func decodeSnapshotSpec(s string) (snapshotSpec, error) {
	var sp snapshotSpec
	if err := json.Unmarshal([]byte(s), &sp); err != nil {
		return sp, fmt.Errorf("decoding snapshot spec: %w", err)
	}
	return sp, nil
}

// snapState tracks snapshots in use; the zero value is ready.
type snapState struct {
	// mu guards the maps below.
	mu       sync.Mutex
	inUse    map[string]int    // creates restoring from a snapshot, by id
	deleting map[string]bool   // snapshots being deleted
	invalid  map[string]string // snapshots that failed verification → why
}

// acquire marks a restore from id in flight; 409 while it is being deleted.
func (s *snapState) acquire(id string) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleting[id] {
		return nil, userErrorf(http.StatusConflict, "snapshot %q is being deleted", id)
	}
	if why, bad := s.invalid[id]; bad {
		return nil, userErrorf(http.StatusConflict, "snapshot %q failed verification (%s) and cannot be used; delete it", id, why)
	}
	if s.inUse == nil {
		s.inUse = map[string]int{}
	}
	s.inUse[id]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.inUse[id]--; s.inUse[id] <= 0 {
			delete(s.inUse, id)
		}
	}, nil
}

func (s *snapState) problem(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.invalid[id]
}

func (s *snapState) setInvalid(id, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.invalid == nil {
		s.invalid = map[string]string{}
	}
	s.invalid[id] = why
}

// snapshotStore returns the store's snapshot side or a 501 user error.
func (m *Manager) snapshotStore() (store.SnapshotStore, error) {
	ss, ok := m.cfg.Store.(store.SnapshotStore)
	if !ok {
		return nil, userErrorf(http.StatusNotImplemented, "this daemon's store cannot keep snapshots")
	}
	return ss, nil
}

func (m *Manager) snapshotsDir() string { return filepath.Join(m.cfg.DataDir, "snapshots") }

func (m *Manager) snapshotDir(id string) string { return filepath.Join(m.snapshotsDir(), id) }

// newSnapshotID returns "s" followed by 20 characters from [a-z0-9].
func newSnapshotID() (string, error) {
	id, err := newID()
	if err != nil {
		return "", err
	}
	return "s" + id[1:], nil
}

func (m *Manager) toSnapshotInfo(s *store.Snapshot) *SnapshotInfo {
	sp, _ := decodeSnapshotSpec(s.Spec)
	return &SnapshotInfo{ID: s.ID, Name: s.Name, SandboxID: s.SandboxID, TemplateID: sp.TemplateID,
		SizeBytes: s.SizeBytes, CreatedAt: s.CreatedAt, Problem: m.snaps.problem(s.ID)}
}

// CreateSnapshot saves the running sandbox id as a named snapshot; the
// sandbox keeps running (it is stopped for the checkpoint and the layer
// copy, then restored like a fork parent). A name already used by another
// snapshot moves to the new one. 404 unknown sandbox, 409 paused or busy
// or stopped, 400 bad name, 501 when the runtime or store cannot.
func (m *Manager) CreateSnapshot(ctx context.Context, id, name string) (*SnapshotInfo, error) {
	ss, err := m.snapshotStore()
	if err != nil {
		return nil, err
	}
	if name != "" {
		if !snapshotNamePattern.MatchString(name) {
			return nil, userErrorf(http.StatusBadRequest, "invalid snapshot name %q: want [a-z0-9][a-z0-9._-]*, at most 64 characters", name)
		}
		if _, err := m.cfg.Templates.Resolve(ctx, name); err == nil {
			return nil, userErrorf(http.StatusConflict, "the name %q is taken by a template", name)
		}
	}
	cp, err := m.checkpointer()
	if err != nil {
		return nil, err
	}
	ls := m.caps.LayerSaver
	if ls == nil {
		return nil, userErrorf(http.StatusNotImplemented, "the %q runtime cannot snapshot sandboxes", m.cfg.Runtime.Name())
	}
	snapID, err := newSnapshotID()
	if err != nil {
		return nil, err
	}
	e, err := m.Lookup(id)
	if err == nil {
		err = e.beginOp(ctx, opSnapshotting, false)
	}
	if IsNotFound(err) {
		return nil, m.notFound(id)
	}
	if err != nil {
		return nil, err
	}
	start := time.Now()
	final := m.snapshotDir(snapID)
	sp, err := e.capture(ctx, cp, ls, snapID, final, true)
	if err != nil {
		return nil, err
	}
	uploaded := false
	if m.cfg.Node != nil {
		// On a cluster node every node may start from it: it is in the
		// artifact store (with the agent build it runs) before it is
		// recorded.
		err := error(nil)
		if sp.AgentBlob, err = m.cfg.Node.StoreAgent(ctx, sp.AgentPath); err == nil {
			sp.ImageDigest, err = m.cfg.Node.StoreSnapshot(ctx, snapID, final)
		}
		if err != nil {
			_ = os.RemoveAll(final)
			ue, _ := AsUserError(m.storeError(fmt.Sprintf("creating a snapshot of sandbox %s: uploading it failed", id), err))
			return nil, userErrorf(ue.Code, "%s; the sandbox keeps running", ue.Msg)
		}
		uploaded = true
	}
	dropUpload := func() {
		if uploaded {
			m.dropStored(snapID, m.cfg.Node.DropSnapshot)
		}
	}
	spec, _ := json.Marshal(sp)
	rec := &store.Snapshot{ID: snapID, Name: name, SandboxID: id, SizeBytes: diskUsage(final),
		CreatedAt: time.Now().UTC(), Spec: string(spec)}
	if err := m.takeName(ctx, ss, name); err != nil {
		_ = os.RemoveAll(final)
		dropUpload()
		return nil, err
	}
	if err := ss.PutSnapshot(ctx, rec); err != nil {
		_ = os.RemoveAll(final)
		dropUpload()
		return nil, fmt.Errorf("saving snapshot: %w", err)
	}
	m.log.Info("snapshot created", "sandbox", id, "snapshot", snapID, "name", name,
		"elapsed", time.Since(start), "bytes", rec.SizeBytes)
	return m.toSnapshotInfo(rec), nil
}

// capture saves the running sandbox e (already marked busy) into
// the new directory final: freeze, checkpoint, copy of the writable layer,
// links to the memory image, a manifest, then an atomic rename. With
// keepSource the sandbox is restored in the background (like a fork
// parent); otherwise it is destroyed. capture ends the operation on e.
func (e *Live) capture(ctx context.Context, cp runtime.Checkpointer, ls runtime.LayerSaver,
	snapID, final string, keepSource bool) (snapshotSpec, error) {
	m, id := e.m, e.rec.ID
	var sp snapshotSpec
	parentBack := false
	defer func() {
		if !parentBack {
			e.endOp()
		}
	}()
	if st, err := m.cfg.Runtime.State(ctx, id); err != nil || st != runtime.StateRunning {
		if err == nil {
			err = fmt.Errorf("state %s", st)
		}
		return sp, userErrorf(http.StatusConflict, "sandbox %q is not running (%v); it cannot be snapshotted", id, err)
	}
	src := e.record()
	tpl, err := m.unchangedTemplate(ctx, &src, "snapshotted")
	if err != nil {
		return sp, err
	}
	agent, err := m.agentOf(&src)
	if err != nil {
		return sp, err
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		return sp, fmt.Errorf("creating snapshots dir: %w", err)
	}
	tmp := filepath.Join(filepath.Dir(final), ".tmp-"+snapID)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return sp, fmt.Errorf("creating snapshot dir: %w", err)
	}
	published := false
	defer func() {
		if !published {
			_ = os.RemoveAll(tmp)
		}
	}()

	start := time.Now()
	dir := m.sandboxDir(id)
	img := m.imageDir(id)
	if _, step, err := e.checkpointLive(ctx, cp, "a snapshot", m.newSteps(opSnapshot, kindParent, id)); err != nil {
		if step == checkpointStop {
			return sp, fmt.Errorf("checkpointing sandbox %s for a snapshot (the sandbox was stopped): %w", id, err)
		}
		return sp, err
	}
	checkpointed := time.Since(start)
	saveErr := ls.SaveLayer(ctx, dir, tmp)
	if saveErr == nil {
		saveErr = linkTree(img, filepath.Join(tmp, snapshotCheckpoint))
	}
	saved := time.Since(start)

	if keepSource {
		// The sandbox comes back in the background (like a fork parent);
		// its image is removed once it runs (the snapshot has its own links).
		parentBack = true
		e.bringBack(ctx, cp, func(err error) {
			if err == nil {
				if err := os.RemoveAll(img); err != nil {
					m.log.Warn("removing snapshot checkpoint", "sandbox", id, "err", err)
				}
			}
		})
	} else {
		e.dropStopped(ctx) // removes the stopped sandbox
	}
	if saveErr != nil {
		return sp, fmt.Errorf("saving snapshot of %s: %w", id, saveErr)
	}
	if err := writeManifest(tmp, snapID); err != nil {
		return sp, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return sp, fmt.Errorf("publishing snapshot: %w", err)
	}
	published = true
	syncDir(filepath.Dir(final))
	m.log.Debug("sandbox captured", "sandbox", id, "snapshot", snapID, "checkpoint", checkpointed,
		"save", saved-checkpointed, "elapsed", time.Since(start))
	return snapshotSpec{
		TemplateID: tpl.Name, TemplateHash: tpl.Hash, Runtime: m.cfg.Runtime.Name(),
		AccessToken: src.AccessToken, EnvVars: src.EnvVars,
		CPUCount: src.CPUCount, MemoryMB: src.MemoryMB, DiskSizeMB: src.DiskSizeMB,
		AgentPath: agent, RuntimeBuild: m.runtimeBuild(),
		Volumes: decodeExtra(src.Extra).Volumes,
	}, nil
}

// takeName removes name from the snapshot that has it, if any.
func (m *Manager) takeName(ctx context.Context, ss store.SnapshotStore, name string) error {
	if name == "" {
		return nil
	}
	if h := m.cfg.Node; h != nil { // names are the cluster's
		return h.ClearSnapshotName(ctx, name)
	}
	all, err := ss.ListSnapshots(ctx)
	if err != nil {
		return fmt.Errorf("listing snapshots: %w", err)
	}
	for _, s := range all {
		if s.Name == name {
			s.Name = ""
			if err := ss.PutSnapshot(ctx, s); err != nil {
				return fmt.Errorf("moving snapshot name: %w", err)
			}
		}
	}
	return nil
}

// lookupSnapshot finds a snapshot by id or name (nil when there is none).
func (m *Manager) lookupSnapshot(ctx context.Context, ref string) *store.Snapshot {
	ss, err := m.snapshotStore()
	if err != nil || ref == "" {
		return nil
	}
	if h := m.cfg.Node; h != nil {
		// Any node's, by id, else the cluster's newest with that name.
		if s, err := h.FindSnapshot(ctx, ref); err == nil {
			return s
		}
		return nil
	}
	if s, err := ss.GetSnapshot(ctx, ref); err == nil {
		return s
	}
	all, err := ss.ListSnapshots(ctx)
	if err != nil {
		m.log.Warn("listing snapshots", "err", err)
		return nil
	}
	for _, s := range all {
		if s.Name == ref {
			return s
		}
	}
	return nil
}

// SnapshotFilter selects snapshots in ListSnapshots.
type SnapshotFilter struct {
	SandboxID string // taken from this sandbox
	Name      string // this name or id
}

// ListSnapshots returns the snapshots matching f, oldest first.
func (m *Manager) ListSnapshots(ctx context.Context, f SnapshotFilter) ([]*SnapshotInfo, error) {
	ss, err := m.snapshotStore()
	if err != nil {
		return nil, err
	}
	all, err := ss.ListSnapshots(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing snapshots: %w", err)
	}
	out := []*SnapshotInfo{}
	for _, s := range all {
		if f.SandboxID != "" && s.SandboxID != f.SandboxID {
			continue
		}
		if f.Name != "" && s.Name != f.Name && s.ID != f.Name {
			continue
		}
		out = append(out, m.toSnapshotInfo(s))
	}
	return out, nil
}

// GetSnapshot returns the snapshot with this id or name, or a 404.
func (m *Manager) GetSnapshot(ctx context.Context, ref string) (*SnapshotInfo, error) {
	s := m.lookupSnapshot(ctx, ref)
	if s == nil {
		return nil, userErrorf(http.StatusNotFound, "snapshot %q not found", ref)
	}
	return m.toSnapshotInfo(s), nil
}

// DeleteSnapshot removes the snapshot with this id or name: its row, then
// its files. 404 unknown, 409 while a sandbox is being created from it.
// Sandboxes already created from it are independent copies and live on.
func (m *Manager) DeleteSnapshot(ctx context.Context, ref string) error {
	ss, err := m.snapshotStore()
	if err != nil {
		return err
	}
	s := m.lookupSnapshot(ctx, ref)
	if s == nil {
		return userErrorf(http.StatusNotFound, "snapshot %q not found", ref)
	}
	m.snaps.mu.Lock()
	if m.snaps.inUse[s.ID] > 0 {
		m.snaps.mu.Unlock()
		return userErrorf(http.StatusConflict, "snapshot %q is being restored into a sandbox; try again when the create is done", ref)
	}
	if m.snaps.deleting[s.ID] {
		m.snaps.mu.Unlock()
		return userErrorf(http.StatusConflict, "snapshot %q is already being deleted", ref)
	}
	if m.snaps.deleting == nil {
		m.snaps.deleting = map[string]bool{}
	}
	m.snaps.deleting[s.ID] = true
	m.snaps.mu.Unlock()
	defer func() {
		m.snaps.mu.Lock()
		delete(m.snaps.deleting, s.ID)
		delete(m.snaps.invalid, s.ID)
		m.snaps.mu.Unlock()
	}()
	if err := ss.DeleteSnapshot(ctx, s.ID); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return userErrorf(http.StatusNotFound, "snapshot %q not found", ref)
		}
		return fmt.Errorf("deleting snapshot row: %w", err)
	}
	// Files without a row are garbage collected at the next start if this
	// fails.
	if err := os.RemoveAll(m.snapshotDir(s.ID)); err != nil {
		m.log.Warn("removing snapshot files", "snapshot", s.ID, "err", err)
	}
	if m.cfg.Node != nil {
		m.dropStored(s.ID, m.cfg.Node.DropSnapshot)
	}
	m.log.Info("snapshot deleted", "snapshot", s.ID, "name", s.Name)
	return nil
}

// SnapshotReport summarises InitSnapshots.
type SnapshotReport struct {
	Verified  []string // snapshots whose manifest verified
	Invalid   []string // kept, but never used (failed verification)
	Removed   []string // rows without files (deleted)
	Collected []string // files without rows (deleted)
}

// InitSnapshots runs once at startup: every stored snapshot's manifest is
// verified (one that does not verify is marked unusable), rows whose files
// are gone are deleted, and files that no row references (including
// half-written .tmp-* dirs) are removed.
func (m *Manager) InitSnapshots(ctx context.Context) (SnapshotReport, error) {
	var rep SnapshotReport
	ss, err := m.snapshotStore()
	if err != nil {
		return rep, nil // nothing to do
	}
	rows, err := ss.ListSnapshots(ctx)
	if err != nil {
		return rep, fmt.Errorf("listing snapshots: %w", err)
	}
	known := map[string]bool{}
	for _, s := range rows {
		dir := m.snapshotDir(s.ID)
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			if err := ss.DeleteSnapshot(ctx, s.ID); err != nil {
				return rep, fmt.Errorf("deleting snapshot row %s: %w", s.ID, err)
			}
			m.log.Warn("snapshot files missing; snapshot removed", "snapshot", s.ID)
			rep.Removed = append(rep.Removed, s.ID)
			continue
		}
		known[s.ID] = true
		if err := verifyManifest(dir, s.ID); err != nil {
			m.snaps.setInvalid(s.ID, err.Error())
			m.log.Error("snapshot failed verification; it will not be used", "snapshot", s.ID, "err", err)
			rep.Invalid = append(rep.Invalid, s.ID)
			continue
		}
		rep.Verified = append(rep.Verified, s.ID)
	}
	ents, err := os.ReadDir(m.snapshotsDir())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return rep, fmt.Errorf("reading snapshots dir: %w", err)
	}
	for _, de := range ents {
		if known[de.Name()] || strings.HasPrefix(de.Name(), bootPrefix) {
			continue // boot snapshots are PrepareBootSnapshots' business
		}
		if err := os.RemoveAll(filepath.Join(m.snapshotsDir(), de.Name())); err != nil {
			m.log.Warn("removing unreferenced snapshot files", "path", de.Name(), "err", err)
			continue
		}
		rep.Collected = append(rep.Collected, de.Name())
	}
	return rep, nil
}
