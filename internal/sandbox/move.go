package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Moving sandboxes between the nodes of a cluster (issue 17). On a node
// with an artifact store (Config.Images) and a shared store (store.Mover):
//
//   - a pause uploads the paused sandbox's image (a saved copy of its
//     writable layer, its memory image and image.json) under paused/<id>
//     before it answers; a pause that cannot upload brings the sandbox back
//     and fails, so nothing is paused that only this node could resume;
//   - another node adopts a paused sandbox (the api tier asks it when the
//     sandbox's node is draining, lost or stopped): it claims the row in one
//     conditional UPDATE (of two claims one wins) and holds the sandbox as
//     paused without local files; its resume fetches the image and restores
//     it like a fork child, under the same id and token, at this node's
//     address, then removes the image from the store;
//   - a resume on the node that paused it claims the row the same way, so a
//     sandbox is never resumed by two nodes;
//   - a node drops a paused sandbox whose row moved away (DropMoved);
//   - Evacuate pauses and uploads every running sandbox (drain, SIGTERM),
//     marked evacuated: its next request resumes it wherever it lands;
//   - named snapshots are uploaded under snapshots/<id> when they are made,
//     and a create from a snapshot another node made fetches it.

// Images stores directories where every node of the cluster can fetch them
// (the daemon's artifact store).
type Images interface {
	// Put stores the directory dir under key, replacing what was there.
	Put(ctx context.Context, key, dir string) error
	// Get fetches what key holds into the new directory dst.
	Get(ctx context.Context, key, dst string) error
	// Delete removes key and the content only it names.
	Delete(ctx context.Context, key string) error
	// Unavailable reports whether err says the store could not be reached.
	Unavailable(err error) bool
}

// Keys of the images.
func pausedKey(id string) string       { return "paused/" + id }
func snapshotKey(snapID string) string { return "snapshots/" + snapID }

// imageSpecFile describes an uploaded paused image (a snapshotSpec).
const imageSpecFile = "image.json"

// Row states a resume claims while it restores (store.Mover.ClaimSandbox).
const stateResuming = "resuming"

// mover is the shared store when this manager moves sandboxes (a cluster
// node with an artifact store), else nil.
func (m *Manager) mover() store.Mover {
	if m.cfg.Images == nil {
		return nil
	}
	mv, _ := m.cfg.Store.(store.Mover)
	return mv
}

func (m *Manager) exportsDir() string { return filepath.Join(m.cfg.DataDir, "exports") }
func (m *Manager) importsDir() string { return filepath.Join(m.cfg.DataDir, "imports") }

// clearMoveDirs removes exports and imports left by a daemon that died
// during one (run at startup, when nothing uses them).
func (m *Manager) clearMoveDirs() {
	for _, d := range []string{m.exportsDir(), m.importsDir()} {
		if err := os.RemoveAll(d); err != nil {
			m.log.Warn("removing left-over move directory", "dir", d, "err", err)
		}
	}
}

// tempIn makes a new directory in parent (created when missing).
func tempIn(parent, prefix string) (string, error) {
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return "", err
	}
	return os.MkdirTemp(parent, prefix)
}

// storeError is the user error of a failed artifact-store operation: 503
// when the store could not be reached, else 500; what says what failed.
func (m *Manager) storeError(what string, err error) error {
	if m.cfg.Images != nil && m.cfg.Images.Unavailable(err) {
		return userErrorf(http.StatusServiceUnavailable, "%s: the artifact store is unreachable: %v", what, err)
	}
	return userErrorf(http.StatusInternalServerError, "%s: %v", what, err)
}

// export uploads the checkpointed sandbox e (busy; its memory image in
// imageDir) under pausedKey: a saved copy of its writable layer, links to
// the memory image, and image.json.
func (e *Live) export(ctx context.Context) error {
	m, id := e.m, e.rec.ID
	ls := m.caps.LayerSaver
	if ls == nil {
		return fmt.Errorf("the %q runtime cannot save a sandbox's layer", m.cfg.Runtime.Name())
	}
	rec := e.record()
	agent, err := m.agentOf(&rec)
	if err != nil {
		return err
	}
	name := rec.TemplateID
	if base := decodeExtra(rec.Extra).BaseTemplate; base != "" {
		name = base
	}
	tmp, err := tempIn(m.exportsDir(), id+"-")
	if err != nil {
		return fmt.Errorf("making the export directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	img := filepath.Join(tmp, "image")
	if err := os.Mkdir(img, 0o700); err != nil {
		return err
	}
	if err := ls.SaveLayer(ctx, m.sandboxDir(id), img); err != nil {
		return fmt.Errorf("saving the layer of %s: %w", id, err)
	}
	if err := linkTree(m.imageDir(id), filepath.Join(img, snapshotCheckpoint)); err != nil {
		return fmt.Errorf("linking the memory image of %s: %w", id, err)
	}
	sp := snapshotSpec{TemplateID: name, TemplateHash: rec.TemplateHash, Runtime: m.cfg.Runtime.Name(),
		AccessToken: rec.AccessToken, CPUCount: rec.CPUCount, MemoryMB: rec.MemoryMB, DiskSizeMB: rec.DiskSizeMB,
		AgentPath: agent, RuntimeBuild: m.runtimeBuild()}
	b, _ := json.Marshal(sp)
	if err := os.WriteFile(filepath.Join(img, imageSpecFile), b, 0o600); err != nil {
		return err
	}
	saved := time.Since(start)
	if err := m.cfg.Images.Put(ctx, pausedKey(id), img); err != nil {
		return err
	}
	m.log.Info("paused sandbox uploaded", "sandbox", id, "save", saved, "elapsed", time.Since(start))
	return nil
}

// dropImage removes an image from the store in the background (a resumed
// or killed sandbox's, a deleted snapshot's); a failure is logged.
func (m *Manager) dropImage(key string) {
	if m.cfg.Images == nil {
		return
	}
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := m.cfg.Images.Delete(ctx, key); err != nil {
			m.log.Warn("removing an image from the artifact store", "key", key, "err", err)
		}
	}()
}

// movedError is the answer when a claim found the sandbox elsewhere.
func movedError(id string, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound(id)
	case errors.Is(err, store.ErrMoved):
		return userErrorf(http.StatusConflict, "sandbox %q is no longer paused on this node (moved or resumed elsewhere); try again", id)
	}
	return fmt.Errorf("claiming sandbox %s: %w", id, err)
}

// claimHere marks e's row resuming on this node, unless another node took
// it: a sandbox whose image is in the store is then dropped here (its row
// is another node's) and the caller gets a 409.
func (e *Live) claimHere(ctx context.Context) error {
	m, id := e.m, e.rec.ID
	if _, err := m.mover().ClaimSandbox(ctx, id, m.cfg.NodeID, stateResuming); err != nil {
		if errors.Is(err, store.ErrMoved) || errors.Is(err, store.ErrNotFound) {
			m.dropLocal(ctx, e)
		}
		return movedError(id, err)
	}
	return nil
}

// unclaim writes e's row back as paused after a resume that failed.
func (e *Live) unclaim(ctx context.Context) {
	if err := e.commit(context.WithoutCancel(ctx), "paused state", func() { e.rec.State = StatePaused }); err != nil {
		e.m.log.Error("writing a sandbox back as paused after a failed resume", "sandbox", e.rec.ID, "err", err)
	}
}

// dropLocal forgets a sandbox whose row moved to another node and frees
// what it held here; the row (another node's now) and its image stay.
func (m *Manager) dropLocal(ctx context.Context, e *Live) {
	if !m.unindex(e) {
		return
	}
	rec := e.record()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	if err := m.release(cctx, rec.ID, rec.Slot, e.Dir()); err != nil {
		m.log.Warn("freeing a sandbox that moved to another node", "sandbox", rec.ID, "err", err)
	}
	m.log.Info("paused sandbox moved to another node; dropped here", "sandbox", rec.ID)
}

// leaveMovable frees what the paused sandboxes whose image is in the
// artifact store hold here, keeping their rows and images: KillAll (a
// node stopping with --kill-on-exit, after drainOnStop paused its
// sandboxes) leaves them for other nodes to adopt, or for this node to
// re-attach from the store when it is back.
func (m *Manager) leaveMovable(ctx context.Context) {
	if m.mover() == nil {
		return
	}
	for _, e := range m.liveList() {
		e.mu.Lock()
		movable := !e.gone && e.op == "" && e.rec.State == StatePaused && decodeExtra(e.rec.Extra).Image != ""
		slot := e.rec.Slot
		e.mu.Unlock()
		if !movable || !m.unindex(e) {
			continue
		}
		var u undo
		g := giveBack{m: m, id: e.rec.ID, slot: slot, dir: e.Dir()}
		g.slotStep(&u)
		g.network(&u)
		g.runtime(&u)
		if err := u.run(ctx); err != nil {
			m.log.Warn("freeing a paused sandbox left to the artifact store", "sandbox", e.rec.ID, "err", err)
			continue
		}
		m.log.Info("paused sandbox left to the artifact store", "sandbox", e.rec.ID)
	}
}

// DropMoved drops the paused sandboxes whose rows another node claimed
// (adopted after a drain, or while this node was cut off). The node runs
// it with its heartbeats.
func (m *Manager) DropMoved(ctx context.Context) {
	if m.mover() == nil {
		return
	}
	for _, e := range m.liveList() {
		e.mu.Lock()
		movable := !e.gone && e.op == "" && e.rec.State == StatePaused && decodeExtra(e.rec.Extra).Image != ""
		e.mu.Unlock()
		if !movable {
			continue
		}
		if _, err := m.cfg.Store.GetSandbox(ctx, e.rec.ID); errors.Is(err, store.ErrNotFound) && !e.inOp() {
			m.dropLocal(ctx, e)
		}
	}
}

// liveList returns the indexed sandboxes that are not hidden.
func (m *Manager) liveList() []*Live {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Live, 0, len(m.sandboxes))
	for _, e := range m.sandboxes {
		if !e.hidden {
			out = append(out, e)
		}
	}
	return out
}

// Adopt makes the paused sandbox id, whose row is on node from, this
// node's: the row is claimed (a 409 when it is not paused there any
// more) and the sandbox is held here as paused, its image still in the
// store; its resume fetches it. A sandbox already here is returned as it
// is.
func (m *Manager) Adopt(ctx context.Context, id, from string) (*Sandbox, error) {
	mv := m.mover()
	if mv == nil {
		return nil, userErrorf(http.StatusNotImplemented, "this daemon does not move sandboxes (no artifact store or shared store)")
	}
	if e, err := m.Lookup(id); err == nil {
		return e.View(), nil
	}
	rec, err := mv.ClaimSandbox(ctx, id, from, StatePaused)
	if err != nil {
		return nil, movedError(id, err)
	}
	rec.Slot, rec.GuestIP = -1, ""
	if err := m.cfg.Store.PutSandbox(ctx, rec); err != nil {
		return nil, fmt.Errorf("saving adopted sandbox %s: %w", id, err)
	}
	m.mu.Lock()
	e, ok := m.sandboxes[id]
	if !ok {
		e = m.newLive(rec, netip.Addr{}, false)
		m.sandboxes[id] = e
	}
	m.mu.Unlock()
	m.log.Info("paused sandbox adopted", "sandbox", id, "from", from)
	return e.View(), nil
}

// imported reports whether e is paused here without local files: adopted
// from another node, its image in the store.
func (e *Live) imported() bool {
	e.mu.Lock()
	img := decodeExtra(e.rec.Extra).Image
	e.mu.Unlock()
	return img != "" && !e.m.hasCheckpoint(e.rec.ID)
}

// resumeImported resumes e (busy, paused, adopted) from its image in the
// store: the row is claimed, the image fetched, the sandbox restored like a
// fork child under its own id and token at an address of this node, its
// agent given its identity again (and the clock), and the image removed
// from the store. On failure it stays paused here, image kept.
func (e *Live) resumeImported(ctx context.Context, timeout time.Duration) (*Sandbox, error) {
	m, id := e.m, e.rec.ID
	cp, err := m.checkpointer()
	if err != nil {
		return nil, err
	}
	ls := m.caps.LayerSaver
	if ls == nil {
		return nil, userErrorf(http.StatusNotImplemented, "the %q runtime cannot restore moved sandboxes", m.cfg.Runtime.Name())
	}
	start := time.Now()
	if err := e.claimHere(ctx); err != nil {
		return nil, err
	}
	done := false
	defer func() {
		if !done {
			e.unclaim(ctx)
		}
	}()
	rec := e.record()
	if m.cfg.Admit != nil {
		release, err := m.cfg.Admit(Limits{CPUCount: rec.CPUCount, MemoryMB: rec.MemoryMB})
		if err != nil {
			return nil, err
		}
		defer release()
	}
	parent, err := tempIn(m.importsDir(), id+"-")
	if err != nil {
		return nil, fmt.Errorf("making the import directory: %w", err)
	}
	defer os.RemoveAll(parent)
	dir := filepath.Join(parent, "image")
	if err := m.cfg.Images.Get(ctx, pausedKey(id), dir); err != nil {
		return nil, m.storeError(fmt.Sprintf("fetching the image of paused sandbox %s", id), err)
	}
	fetched := time.Since(start)
	b, err := os.ReadFile(filepath.Join(dir, imageSpecFile))
	if err != nil {
		return nil, fmt.Errorf("reading the image of %s: %w", id, err)
	}
	sp, err := decodeSnapshotSpec(string(b))
	if err != nil {
		return nil, err
	}
	if sp.Runtime != m.cfg.Runtime.Name() || (sp.RuntimeBuild != "" && sp.RuntimeBuild != m.runtimeBuild()) {
		return nil, userErrorf(http.StatusConflict, "sandbox %q was paused by the %s runtime (build %q); node %s runs %s (build %q) and cannot resume it",
			id, sp.Runtime, sp.RuntimeBuild, m.cfg.NodeID, m.cfg.Runtime.Name(), m.runtimeBuild())
	}
	tpl, err := m.unchangedTemplate(ctx, &rec, "resumed on another node")
	if err != nil {
		return nil, err
	}
	k := &child{id: id, token: rec.AccessToken}
	if err := m.prepareIn(ctx, k, &rec, tpl, false, func(ctx context.Context, spec runtime.Spec) error {
		return ls.CloneSaved(ctx, dir, spec)
	}); err != nil {
		return nil, err
	}
	if err := m.wakeChild(ctx, cp, k, filepath.Join(dir, snapshotCheckpoint)); err != nil {
		m.releaseChild(ctx, k)
		return nil, fmt.Errorf("resuming moved sandbox %s: %w", id, err)
	}
	host := k.ep.GuestIP.String()
	envs := maps.Clone(tpl.Env)
	if envs == nil {
		envs = map[string]string{}
	}
	maps.Copy(envs, rec.EnvVars)
	envs["E2B_SANDBOX"] = "true"
	envs["E2B_SANDBOX_ID"] = id
	envs["E2B_TEMPLATE_ID"] = rec.TemplateID
	body := guest.InitRequest{EnvVars: envs, Timestamp: time.Now().UTC(), DefaultUser: DefaultUser, DefaultWorkdir: DefaultWorkdir}
	if rec.AccessToken != "" {
		body.AccessToken = &rec.AccessToken
	}
	if err := m.agent.Init(ctx, host, body, rec.AccessToken); err != nil {
		m.releaseChild(ctx, k)
		return nil, fmt.Errorf("initialising moved sandbox %s: %w", id, err)
	}
	sb, err := e.commitRunning(ctx, timeout, func() {
		e.rec.Slot, e.rec.GuestIP, e.guestIP = k.slot, host, k.ep.GuestIP
		e.rec.Runtime = m.cfg.Runtime.Name()
		e.rec.Extra = encodeExtra(resumedExtra(decodeExtra(e.rec.Extra)))
	})
	if err != nil {
		m.releaseChild(ctx, k)
		return nil, err
	}
	done = true
	m.dropImage(pausedKey(id))
	m.log.Info("moved sandbox resumed", "sandbox", id, "fetch", fetched, "elapsed", time.Since(start))
	return sb, nil
}

// resumedExtra clears what only a paused sandbox has.
func resumedExtra(x extra) extra {
	x.Image, x.Evacuated, x.LeftMs = "", false, 0
	return x
}

// Evacuee is one sandbox Evacuate handled.
type Evacuee struct {
	ID    string
	State string // "paused" once its image is in the store
	// Was is the state before: "running" (paused by Evacuate) or "paused".
	Was string
	// Left is what was left of its timeout when it was paused.
	Left time.Duration
	Err  error
}

// Evacuate pauses every running sandbox of this node into the artifact
// store, marked evacuated (the next request for it resumes it, wherever
// it lands), and uploads the paused ones whose image is not there yet. A
// node that drains or stops runs it; the api tier then hands them to other
// nodes. Sandboxes are handled one at a time.
func (m *Manager) Evacuate(ctx context.Context) []Evacuee {
	var out []Evacuee
	if m.mover() == nil {
		return out
	}
	for _, e := range m.liveList() {
		if ctx.Err() != nil {
			break
		}
		out = append(out, e.evacuate(ctx))
	}
	return out
}

func (e *Live) evacuate(ctx context.Context) Evacuee {
	m := e.m
	v := e.View()
	ev := Evacuee{ID: v.ID, Was: v.State, State: v.State}
	x := func() extra {
		e.mu.Lock()
		defer e.mu.Unlock()
		return decodeExtra(e.rec.Extra)
	}()
	switch {
	case v.State == StateRunning:
		cp, err := m.checkpointer()
		if err == nil {
			err = e.beginOp(ctx, opPausing, false)
		}
		if err != nil {
			ev.Err = err
			return ev
		}
		defer e.endOp()
		ev.Left = time.Until(v.EndAt)
		if err := e.pause(ctx, cp, pauseMode{mustExport: true, evacuate: true}); err != nil {
			ev.Err = err
			return ev
		}
		ev.State = StatePaused
	case x.DiskOnly:
		ev.Err = userErrorf(http.StatusConflict, "sandbox %q was paused without its memory and cannot move to another node", v.ID)
	case x.Image == "":
		if err := e.beginOp(ctx, opPausing, true); err != nil {
			ev.Err = err
			return ev
		}
		defer e.endOp()
		if err := e.export(ctx); err != nil {
			ev.Err = m.storeError(fmt.Sprintf("uploading paused sandbox %s", v.ID), err)
			return ev
		}
		if err := e.commit(ctx, "paused image", func() {
			x := decodeExtra(e.rec.Extra)
			x.Image = pausedKey(v.ID)
			e.rec.Extra = encodeExtra(x)
		}); err != nil {
			ev.Err = err
		}
	}
	return ev
}
