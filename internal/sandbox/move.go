package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Moving sandboxes between the nodes of a cluster (issue 17). On a node
// with an artifact store and a shared store (Config.Node, NodeHooks:
// internal/cluster/node):
//
//   - a pause answers once the checkpoint is durable here, and uploads the
//     paused sandbox's image (a saved copy of its writable layer, its memory
//     image and image.json: Live.WriteImage) under paused/<id>/<nonce> in
//     the background (NodeHooks.Paused: internal/cluster/node's upload.go,
//     which also holds the export, NodeHooks.ExportPaused); until that is
//     done only this node can resume it; a
//     user's pause with the store unreachable is refused before anything
//     is done;
//   - another node adopts a paused sandbox (the api tier asks it when the
//     sandbox's node is draining, lost or stopped): it claims the row in one
//     conditional UPDATE (of two claims one wins) and holds the sandbox as
//     paused without local files; its resume fetches the image and restores
//     its memory image under the same id and token, at this node's
//     address, then removes the image from the store;
//   - a resume on the node that paused it claims the row the same way, so a
//     sandbox is never resumed by two nodes;
//   - a node drops a paused sandbox whose row moved away (Live.Drop;
//     internal/cluster/node's DropMoved finds them);
//   - Live.Evacuate pauses and uploads a running sandbox (internal/cluster/
//     node's Evacuate, on a drain or SIGTERM: every one), marked
//     evacuated: its next request resumes it wherever it lands;
//   - named snapshots are uploaded under snapshots/<id> when they are made,
//     and a create from a snapshot another node made fetches it.

// imageSpecFile describes an uploaded paused image (a snapshotSpec).
const imageSpecFile = "image.json"

// Row states a resume claims while it restores (NodeHooks.Claim).
const stateResuming = "resuming"

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
	if unavailable(m.cfg.Node, err) {
		return userErrorf(http.StatusServiceUnavailable, "%s: the artifact store is unreachable: %v", what, err)
	}
	return userErrorf(http.StatusInternalServerError, "%s: %v", what, err)
}

// PausedImage is a paused sandbox's image in the artifact store, as its
// row records it: what a node that adopts the sandbox checks before it
// claims it.
type PausedImage struct {
	Key       string
	Digest    string // the image's digest, from the store
	Build     string // the runtime build that saved the memory image
	AgentBlob string // the agent binary in the store
}

// WriteImage writes the image of e (busy, checkpointed here: its memory
// image in imageDir) into a new directory under the node's exports
// directory: a saved copy of its writable layer, links to the memory
// image, and image.json. storeAgent is asked first for the agent binary e
// runs (the store keeps files by content: once per build); its reference
// is recorded in image.json. It returns the directory, the image's Build
// and AgentBlob, and remove, which the caller calls once it uploaded the
// directory. The node's export (NodeHooks.ExportPaused) calls it.
func (e *Live) WriteImage(ctx context.Context, storeAgent func(context.Context, string) (string, error)) (dir string, im PausedImage, remove func(), err error) {
	m, id := e.m, e.rec.ID
	ls := m.caps.LayerSaver
	if ls == nil {
		return "", im, nil, fmt.Errorf("the %q runtime cannot save a sandbox's layer", m.cfg.Runtime.Name())
	}
	rec := e.record()
	agent, err := m.agentOf(&rec)
	if err != nil {
		return "", im, nil, err
	}
	im.Build = m.runtimeBuild()
	name := rec.TemplateID
	if base := decodeExtra(rec.Extra).BaseTemplate; base != "" {
		name = base
	}
	tmp, err := tempIn(m.exportsDir(), id+"-")
	if err != nil {
		return "", im, nil, fmt.Errorf("making the export directory: %w", err)
	}
	cleanup := func() { os.RemoveAll(tmp) }
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	if im.AgentBlob, err = storeAgent(ctx, agent); err != nil {
		return "", im, nil, fmt.Errorf("uploading the agent binary: %w", err)
	}
	img := filepath.Join(tmp, "image")
	if err = os.Mkdir(img, 0o700); err != nil {
		return "", im, nil, err
	}
	if err = ls.SaveLayer(ctx, m.sandboxDir(id), img); err != nil {
		return "", im, nil, fmt.Errorf("saving the layer of %s: %w", id, err)
	}
	if err = linkTree(m.imageDir(id), filepath.Join(img, snapshotCheckpoint)); err != nil {
		return "", im, nil, fmt.Errorf("linking the memory image of %s: %w", id, err)
	}
	sp := snapshotSpec{TemplateID: name, TemplateHash: rec.TemplateHash, Runtime: m.cfg.Runtime.Name(),
		AccessToken: rec.AccessToken, CPUCount: rec.CPUCount, MemoryMB: rec.MemoryMB, DiskSizeMB: rec.DiskSizeMB,
		AgentPath: agent, AgentBlob: im.AgentBlob, RuntimeBuild: im.Build}
	b, _ := json.Marshal(sp)
	if err = os.WriteFile(filepath.Join(img, imageSpecFile), b, 0o600); err != nil {
		return "", im, nil, err
	}
	return img, im, cleanup, nil
}

// StillUploading reports whether e is paused here with its row saying
// uploading (its image not in the store yet).
func (e *Live) StillUploading() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.gone && e.rec.State == StatePaused && decodeExtra(e.rec.Extra).Uploading
}

// CommitUpload records im, e's image uploaded in the background, in e's
// row (movable from then on) unless ctx ended or the sandbox is no longer
// paused and uploading: then the caller drops im from the store.
func (e *Live) CommitUpload(ctx context.Context, im PausedImage) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if e.gone || e.rec.State != StatePaused || !decodeExtra(e.rec.Extra).Uploading {
		return errors.New("the sandbox is no longer paused here")
	}
	rec := e.rec
	x := decodeExtra(rec.Extra)
	x.Uploading = false
	rec.Extra = encodeExtra(withImage(x, im))
	// Written even if ctx ends now: the image is in the store.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := e.m.cfg.Store.PutSandbox(cctx, &rec); err != nil {
		return fmt.Errorf("saving the uploaded image of %s: %w", rec.ID, err)
	}
	e.rec.Extra = rec.Extra // only the extra changed (ID is read without the lock)
	return nil
}

// Log is the manager's logger (its records about a sandbox, with a
// "sandbox" attribute, are that sandbox's events: events.go).
func (e *Live) Log() *slog.Logger { return e.m.log }

// exportPaused uploads e's image through the node (nil hooks: never
// called on a single host).
func (e *Live) exportPaused(ctx context.Context) (PausedImage, error) {
	return e.m.cfg.Node.ExportPaused(ctx, e)
}

// withImage records ex in x (the row's extra of a paused sandbox).
func withImage(x extra, ex PausedImage) extra {
	x.Image, x.ImageDigest, x.ImageBuild, x.AgentBlob = ex.Key, ex.Digest, ex.Build, ex.AgentBlob
	return x
}

// agentsDir is where this node keeps agent builds (agentbin: one
// directory per content hash): the parent of its current agent's.
func (m *Manager) agentsDir() string { return filepath.Dir(filepath.Dir(m.cfg.AgentPath)) }

// agentHere is where the agent build at path (recorded by any node: its
// directory name is the build's content hash) is in this node's agents
// directory, or "" when path is not an agent build's (agentbin.InDir: the
// path is untrusted).
func (m *Manager) agentHere(path string) string {
	p, _ := agentbin.InDir(m.agentsDir(), path)
	return p
}

// localAgent is the path here of the agent build at path (recorded by
// another node, whose agents directory differs: the build's directory name
// is its content hash), installing it from the store (blob) when this node
// does not have it. "" and no error when it is neither here nor in the
// store.
func (m *Manager) localAgent(ctx context.Context, path, blob string) (string, error) {
	if path == "" || path == m.cfg.AgentPath {
		return m.cfg.AgentPath, nil
	}
	here := m.agentHere(path)
	if here == "" {
		return "", userErrorf(http.StatusConflict, "the recorded agent build %q is not one (want <64 hex digits>/%s)", path, agentbin.FileName)
	}
	if _, err := os.Stat(here); err == nil {
		return here, nil
	}
	if blob == "" || m.cfg.Node == nil {
		return "", nil
	}
	src, err := m.cfg.Node.FetchAgent(ctx, blob)
	if err != nil {
		return "", fmt.Errorf("fetching the agent build the sandbox runs: %w", err)
	}
	got, err := agentbin.Install(m.agentsDir(), src)
	if err != nil {
		return "", err
	}
	if got != here {
		return "", fmt.Errorf("the agent build in the store (%s) is not the one the sandbox runs (%s)", got, path)
	}
	return got, nil
}

// canResume says whether this node can restore the image recorded in
// rec (before it claims it): same runtime and runtime build, and the
// agent build here or in the store.
func (m *Manager) canResume(rec *store.Sandbox) error {
	x := decodeExtra(rec.Extra)
	switch {
	case rec.Runtime != "" && rec.Runtime != m.cfg.Runtime.Name():
		return userErrorf(http.StatusConflict, "sandbox %q runs on the %s runtime; node %s runs %s", rec.ID, rec.Runtime, m.cfg.NodeID, m.cfg.Runtime.Name())
	case x.ImageBuild != "" && x.ImageBuild != m.runtimeBuild():
		return userErrorf(http.StatusConflict, "sandbox %q was paused by another build of the %s runtime (%s); node %s runs %s",
			rec.ID, m.cfg.Runtime.Name(), x.ImageBuild, m.cfg.NodeID, m.runtimeBuild())
	}
	if x.Agent != "" && x.Agent != m.cfg.AgentPath && x.AgentBlob == "" {
		if here := m.agentHere(x.Agent); here == "" {
			return userErrorf(http.StatusConflict, "sandbox %q: the recorded agent build %q is not one", rec.ID, x.Agent)
		} else if _, err := os.Stat(here); err != nil {
			return userErrorf(http.StatusConflict, "sandbox %q runs an agent build node %s does not have", rec.ID, m.cfg.NodeID)
		}
	}
	return nil
}

// dropImage removes a paused image from the store in the background (a
// resumed or killed sandbox's); a failure is logged.
func (m *Manager) dropImage(key string) {
	if m.cfg.Node == nil {
		return
	}
	m.dropStored(key, m.cfg.Node.DropPaused)
}

// dropStored runs drop(ref) in the background (a stored image, a deleted
// snapshot's); a failure is logged.
func (m *Manager) dropStored(ref string, drop func(context.Context, string) error) {
	m.background(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := drop(ctx, ref); err != nil {
			m.log.Warn("removing an image from the artifact store", "key", ref, "err", err)
		}
	})
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
	if _, err := m.cfg.Node.Claim(ctx, id, m.cfg.NodeID, stateResuming, nil); err != nil {
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

// IdleWithImage reports whether e is paused with its image in the store
// and no operation in progress: what may be dropped or left here (a node
// drops it when its row moved away: internal/cluster/node, DropMoved).
func (e *Live) IdleWithImage() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.gone && e.op == "" && e.rec.State == StatePaused && decodeExtra(e.rec.Extra).Image != ""
}

// leaveMovable frees what the paused sandboxes whose image is in the
// artifact store hold here, keeping their rows and images: KillAll (a
// node stopping with --kill-on-exit, after drainOnStop paused its
// sandboxes) leaves them for other nodes to adopt, or for this node to
// re-attach from the store when it is back.
func (m *Manager) leaveMovable(ctx context.Context) {
	if m.cfg.Node == nil {
		return
	}
	// Uploads in progress first (bounded): a sandbox paused a moment ago is
	// left to the store too once its image is there.
	wctx, cancel := context.WithTimeout(ctx, leaveUploadWait)
	for _, e := range m.LiveList() {
		if e.StillUploading() {
			if err := m.cfg.Node.AwaitUpload(wctx, e); err != nil {
				m.log.Warn("a paused sandbox's upload did not finish before the stop", "sandbox", e.rec.ID, "err", err)
			}
		}
	}
	cancel()
	for _, e := range m.LiveList() {
		if !e.IdleWithImage() || !m.unindex(e) {
			continue
		}
		var u undo
		g := giveBack{m: m, id: e.rec.ID, slot: e.record().Slot, dir: e.Dir()}
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

// leaveUploadWait bounds how long leaveMovable waits for uploads.
const leaveUploadWait = 30 * time.Second

// Drop forgets e, paused here with its image in the store and idle
// (IdleWithImage), and frees what it held here; its row (another node's
// now) and its image stay. It reports whether e was dropped.
func (e *Live) Drop(ctx context.Context) bool {
	if !e.IdleWithImage() {
		return false
	}
	e.m.dropLocal(ctx, e)
	return true
}

// LiveList returns the indexed sandboxes that are not hidden, template
// builds or internal ones: those a node evacuates or drops.
func (m *Manager) LiveList() []*Live {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Live, 0, len(m.sandboxes))
	for _, e := range m.sandboxes {
		if !e.hidden && e.rec.Metadata[BuildKey] == "" && e.rec.Metadata[internalKey] == "" {
			out = append(out, e)
		}
	}
	return out
}

// admittedKey marks a context whose resume was admitted already
// (WithAdmitted): resumeImported does not ask Config.Admit again.
type admittedKey struct{}

// WithAdmitted marks ctx as carrying a resume the node's admission
// (Config.Admit) already admitted: the resume of an adopted sandbox under
// it does not ask again (internal/cluster/node's adopt-and-resume).
func WithAdmitted(ctx context.Context) context.Context {
	return context.WithValue(ctx, admittedKey{}, true)
}

// ClaimAdopted makes the paused sandbox id, whose row is on node from,
// this node's: the row is claimed (NodeHooks.Claim; a 409 when it is not
// paused there any more, or this node cannot restore it) and the sandbox
// is held here as paused, its image still in the store; its resume
// fetches it. check, when given, is asked about the row before the claim,
// after this node's own checks. A copy of id still here is stale (the
// caller found that its row is not this node's): it is dropped first. 501
// on a single host. It is the primitive of a node's adoption
// (internal/cluster/node: Adopt).
func (m *Manager) ClaimAdopted(ctx context.Context, id, from string, check func(*store.Sandbox) error) (*Live, error) {
	h := m.cfg.Node
	if h == nil {
		return nil, userErrorf(http.StatusNotImplemented, "this daemon does not move sandboxes (no artifact store or shared store)")
	}
	if e, err := m.Lookup(id); err == nil {
		m.dropLocal(ctx, e) // a stale copy: it moved away since
	}
	rec, err := h.Claim(ctx, id, from, StatePaused, func(rec *store.Sandbox) error {
		if err := m.canResume(rec); err != nil {
			return err
		}
		if check != nil {
			return check(rec)
		}
		return nil
	})
	if err != nil {
		if _, ok := AsUserError(err); ok {
			return nil, err
		}
		return nil, movedError(id, err)
	}
	m.mu.Lock()
	e, ok := m.sandboxes[id]
	if !ok {
		e = m.newLive(rec, netip.Addr{}, false)
		m.sandboxes[id] = e
	}
	m.mu.Unlock()
	m.log.Info("paused sandbox adopted", "sandbox", id, "from", from)
	return e, nil
}

// ErrNotImported is ResumeImported's answer for a sandbox that has its
// files here (paused on this node): Resume resumes it.
var ErrNotImported = errors.New("the sandbox is not paused from an imported image")

// ResumeImported resumes e, paused here without local files (adopted from
// another node by Adopt: its image is in the artifact store), from that
// image, and makes it expire timeout from now (or, evacuated, after what
// was left of its timeout). It is the primitive a node's adopt-and-resume
// uses (internal/cluster/node). ErrNotImported when e has its files here;
// 409 when it is running or busy, 404 gone.
func (e *Live) ResumeImported(ctx context.Context, timeout time.Duration) (*Sandbox, error) {
	if err := e.m.CheckTimeout(timeout); err != nil {
		return nil, err
	}
	if err := e.beginOp(ctx, opResuming, true); err != nil {
		return nil, err
	}
	defer e.endOp()
	e.mu.Lock()
	x := decodeExtra(e.rec.Extra)
	e.mu.Unlock()
	if e.m.cfg.Node == nil || x.Image == "" || !e.imported() {
		return nil, ErrNotImported
	}
	if x.Evacuated && x.LeftMs > 0 { // as Resume
		timeout = max(timeout, time.Duration(x.LeftMs)*time.Millisecond, time.Minute)
	}
	return e.resumeImported(ctx, timeout)
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
// store: the row is claimed, the image fetched, the sandbox restored from
// its memory image under its own id and token at an address of this node, its
// agent given its identity again (and the clock), and the image removed
// from the store. On failure it stays paused here, image kept.
func (e *Live) resumeImported(ctx context.Context, timeout time.Duration) (*Sandbox, error) {
	m, id := e.m, e.rec.ID
	cp, ls, err := m.restorer("restore moved sandboxes")
	if err != nil {
		return nil, err
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
	if m.cfg.Admit != nil && ctx.Value(admittedKey{}) == nil {
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
	x := decodeExtra(rec.Extra)
	// The image is fetched (downloaded, verified, unpacked) while this node
	// checks the template and the agent build and sets up the network: the
	// copy of the layer waits for it (issue 24: a resume on another node is
	// mostly that fetch).
	fetched := make(chan error, 1)
	var fetchTook time.Duration
	go func() {
		t0 := time.Now()
		err := m.cfg.Node.FetchPaused(ctx, x.Image, x.ImageDigest, dir)
		fetchTook = time.Since(t0)
		fetched <- err
	}()
	var fetchErr error
	fetchWait := sync.OnceValue(func() error {
		if err := <-fetched; err != nil {
			fetchErr = m.storeError(fmt.Sprintf("fetching the image of paused sandbox %s", id), err)
		}
		return fetchErr
	})
	defer fetchWait() // before the import directory goes
	tpl, err := m.unchangedTemplate(ctx, &rec, "resumed on another node")
	if err != nil {
		return nil, err
	}
	agentPath, agentBlob := x.Agent, x.AgentBlob
	if agentPath == "" { // a row from before agents were recorded: the image says
		if err := fetchWait(); err != nil {
			return nil, err
		}
		sp, err := readImageSpec(id, dir)
		if err != nil {
			return nil, err
		}
		agentPath, agentBlob = sp.AgentPath, sp.AgentBlob
	}
	agent, err := m.localAgent(ctx, agentPath, agentBlob)
	if err != nil {
		return nil, m.storeError(fmt.Sprintf("resuming sandbox %s", id), err)
	}
	if agent == "" {
		return nil, userErrorf(http.StatusConflict, "sandbox %q runs an agent build node %s does not have", id, m.cfg.NodeID)
	}
	x.Agent = agent
	rec.Extra = encodeExtra(x)
	prepStart := time.Now()
	var waited time.Duration
	k := &child{id: id, token: rec.AccessToken}
	if err := m.prepareIn(ctx, k, &rec, tpl, false, func(ctx context.Context, spec runtime.Spec) error {
		t0 := time.Now()
		if err := fetchWait(); err != nil {
			return err
		}
		waited = time.Since(t0)
		if err := m.checkImageSpec(id, dir, agent); err != nil {
			return err
		}
		if lt, ok := ls.(runtime.LayerTaker); ok { // the fetched image is used once
			return lt.TakeSaved(ctx, dir, spec)
		}
		return ls.CloneSaved(ctx, dir, spec)
	}); err != nil {
		if fetchErr != nil {
			return nil, fetchErr
		}
		if ue, ok := AsUserError(err); ok {
			return nil, ue
		}
		return nil, err
	}
	prepared := time.Since(prepStart)
	wakeStart := time.Now()
	if err := m.wakeChild(ctx, cp, k, filepath.Join(dir, snapshotCheckpoint)); err != nil {
		m.releaseChild(ctx, k)
		return nil, fmt.Errorf("resuming moved sandbox %s: %w", id, err)
	}
	woken := time.Since(wakeStart)
	host := k.ep.GuestIP.String()
	body := guest.InitRequest{EnvVars: initEnv(tpl.Env, rec.EnvVars, id, rec.TemplateID), Timestamp: time.Now().UTC(), DefaultUser: DefaultUser, DefaultWorkdir: DefaultWorkdir,
		CABundle: m.caBundle(decodeExtra(rec.Extra).NetworkRules)}
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
		nx := resumedExtra(decodeExtra(e.rec.Extra))
		nx.Agent = agent
		e.rec.Extra = encodeExtra(nx)
	})
	if err != nil {
		m.releaseChild(ctx, k)
		return nil, err
	}
	done = true
	m.dropImage(x.Image)
	m.log.Info("moved sandbox resumed", "sandbox", id, "fetch", fetchTook, "fetch_waited", waited, "prepare", prepared, "restore", woken,
		"elapsed", time.Since(start))
	return sb, nil
}

// checkImageSpec checks the image.json of a fetched paused image in dir
// (verified by its digest): the runtime and its build must be this node's,
// and the agent build the one the row names (agent: its path here).
func (m *Manager) checkImageSpec(id, dir, agent string) error {
	sp, err := readImageSpec(id, dir)
	if err != nil {
		return err
	}
	if sp.Runtime != m.cfg.Runtime.Name() || (sp.RuntimeBuild != "" && sp.RuntimeBuild != m.runtimeBuild()) {
		return userErrorf(http.StatusConflict, "sandbox %q was paused by the %s runtime (build %q); node %s runs %s (build %q) and cannot resume it",
			id, sp.Runtime, sp.RuntimeBuild, m.cfg.NodeID, m.cfg.Runtime.Name(), m.runtimeBuild())
	}
	if sp.AgentPath != "" && filepath.Base(filepath.Dir(sp.AgentPath)) != filepath.Base(filepath.Dir(agent)) {
		return userErrorf(http.StatusConflict, "sandbox %q: its image runs agent build %s, its row names %s", id, sp.AgentPath, agent)
	}
	return nil
}

// resumedExtra clears what only a paused sandbox has.
func resumedExtra(x extra) extra {
	x.Image, x.ImageDigest, x.ImageBuild, x.AgentBlob, x.Evacuated, x.LeftMs, x.Uploading = "", "", "", "", false, 0, false
	return x
}

// Evacuate pauses e, when running, into the artifact store, marked
// evacuated (its next request resumes it, wherever it lands), or uploads
// it when it is paused and its image is not there yet (waiting for its
// background upload first). It returns e's state before (was: "running"
// or "paused") and after (state: "paused" once its image is in the store),
// and, for a running one, what was left of its timeout. Without an
// artifact store the error says that e cannot move. A node that drains or
// stops runs it for each sandbox (internal/cluster/node: Evacuate).
func (e *Live) Evacuate(ctx context.Context) (was, state string, left time.Duration, err error) {
	ev := evacuate(ctx, e)
	return ev.Was, ev.State, ev.Left, ev.Err
}

// evacuee is what evacuate reports of one sandbox.
type evacuee struct {
	Was, State string
	Left       time.Duration
	Err        error
}

func evacuate(ctx context.Context, e *Live) evacuee {
	m := e.m
	v := e.View()
	ev := evacuee{Was: v.State, State: v.State}
	if m.cfg.Node == nil {
		// No artifact store: nothing can leave this node; the drain says why.
		ev.Err = userErrorf(http.StatusConflict,
			"the cluster has no artifact store (airlock serve --artifacts): sandbox %s cannot move to another node and stays on node %s", v.ID, m.cfg.NodeID)
		return ev
	}
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
		// Its upload runs in the background (internal/cluster/node): the
		// evacuation waits for it, and reports the attempt in flight's
		// failure.
		if x.Uploading {
			start := time.Now()
			if err := m.cfg.Node.AwaitUpload(ctx, e); err != nil {
				ev.Err = m.storeError(fmt.Sprintf("uploading paused sandbox %s", v.ID), err)
				return ev
			}
			e.mu.Lock()
			uploaded := decodeExtra(e.rec.Extra).Image != ""
			e.mu.Unlock()
			if uploaded {
				m.log.Info("evacuation waited for a paused sandbox's upload", "sandbox", v.ID, "waited", time.Since(start))
				return ev
			}
			m.cfg.Node.Resuming(e) // ended without its image (a stop): uploaded here instead
		}
		ex, err := e.exportPaused(ctx)
		if err != nil {
			ev.Err = m.storeError(fmt.Sprintf("uploading paused sandbox %s", v.ID), err)
			return ev
		}
		if err := e.commit(context.WithoutCancel(ctx), "paused image", func() {
			nx := withImage(decodeExtra(e.rec.Extra), ex)
			nx.Uploading = false
			e.rec.Extra = encodeExtra(nx)
		}); err != nil {
			m.dropImage(ex.Key)
			ev.Err = err
		}
	}
	return ev
}

// readImageSpec reads the image.json of the fetched image of sandbox id.
func readImageSpec(id, dir string) (snapshotSpec, error) {
	b, err := os.ReadFile(filepath.Join(dir, imageSpecFile))
	if err != nil {
		return snapshotSpec{}, fmt.Errorf("reading the image of %s: %w", id, err)
	}
	sp, err := decodeSnapshotSpec(string(b))
	if err != nil {
		return snapshotSpec{}, err
	}
	return sp, nil
}
