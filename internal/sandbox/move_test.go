package sandbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clusternode "github.com/airlock-sandbox/airlock/internal/cluster/node"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// sharedRows is the sandboxes table of a cluster's shared store: each
// row has a node, and a node's handle (nodeStore) sees only its own, as
// internal/store/postgres does.
type sharedRows struct {
	mu    sync.Mutex
	rows  map[string]store.Sandbox
	owner map[string]string
}

// nodeStore is one node's handle: sandbox rows scoped to node, the rest
// (templates, settings, snapshots) in its own sandboxtest.Store, and
// store.Mover over the shared rows.
type nodeStore struct {
	*sandboxtest.Store
	node string
	sh   *sharedRows
	// all is every node's snapshot store (AnySnapshot).
	all map[string]*sandboxtest.Store
}

func (s *nodeStore) PutSandbox(ctx context.Context, sb *store.Sandbox) error {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	if o, ok := s.sh.owner[sb.ID]; ok && o != s.node {
		return store.ErrMoved // rows move only by ClaimSandbox, as in PostgreSQL
	}
	s.sh.rows[sb.ID] = *sb
	s.sh.owner[sb.ID] = s.node
	return nil
}

func (s *nodeStore) GetSandbox(ctx context.Context, id string) (*store.Sandbox, error) {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	r, ok := s.sh.rows[id]
	if !ok || s.sh.owner[id] != s.node {
		return nil, store.ErrNotFound
	}
	return &r, nil
}

func (s *nodeStore) ListSandboxes(ctx context.Context) ([]*store.Sandbox, error) {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	var out []*store.Sandbox
	for id, r := range s.sh.rows {
		if s.sh.owner[id] == s.node {
			c := r
			out = append(out, &c)
		}
	}
	return out, nil
}

func (s *nodeStore) DeleteSandbox(ctx context.Context, id string) error {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	if _, ok := s.sh.rows[id]; !ok || s.sh.owner[id] != s.node {
		return store.ErrNotFound
	}
	delete(s.sh.rows, id)
	delete(s.sh.owner, id)
	return nil
}

func (s *nodeStore) ClaimSandbox(ctx context.Context, id, from, state string, check func(*store.Sandbox) error) (*store.Sandbox, error) {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	r, ok := s.sh.rows[id]
	if !ok {
		return nil, store.ErrNotFound
	}
	if s.sh.owner[id] != from || r.State != sandbox.StatePaused || !strings.Contains(r.Extra, `"image":"`) {
		return nil, fmt.Errorf("%s on %s: %w", r.State, s.sh.owner[id], store.ErrMoved)
	}
	if check != nil {
		c := r
		if err := check(&c); err != nil {
			return nil, err
		}
	}
	if from != s.node {
		r.Slot, r.GuestIP = -1, ""
	}
	r.State = state
	s.sh.rows[id] = r
	s.sh.owner[id] = s.node
	return &r, nil
}

func (s *nodeStore) ClearSnapshotName(ctx context.Context, name string) error {
	for _, st := range s.all {
		snaps, _ := st.ListSnapshots(ctx)
		for _, sn := range snaps {
			if sn.Name == name {
				sn.Name = ""
				if err := st.PutSnapshot(ctx, sn); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (s *nodeStore) AnySnapshot(ctx context.Context, ref string) (*store.Snapshot, string, error) {
	for node, st := range s.all {
		if snap, err := st.GetSnapshot(ctx, ref); err == nil {
			return snap, node, nil
		}
	}
	return nil, "", store.ErrNotFound
}

var errStoreDown = errors.New("store down")

// dirImages is clusternode.Images (the artifact store) in a directory; down makes every call fail
// as an unreachable store does.
type dirImages struct {
	root string
	mu   sync.Mutex
	down bool
	puts []string
	dels []string
	// digests are what Put returned per key (a counter: the fake's
	// "content digest"); Get refuses another, as the real store does.
	digests map[string]string
	n       int
	// gate, when set, holds every Put until it is closed (or its context
	// ends): an upload in progress.
	gate chan struct{}
}

// Reachable answers as a reachable store does (Images.Reachable).
func (d *dirImages) Reachable(context.Context) error { return d.check() }

func (d *dirImages) check() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.down {
		return errStoreDown
	}
	return nil
}

func (d *dirImages) Put(ctx context.Context, key, dir string) (string, error) {
	d.mu.Lock()
	gate := d.gate
	d.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if err := d.check(); err != nil {
		return "", err
	}
	dst := filepath.Join(d.root, key)
	_ = os.RemoveAll(dst)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return "", err
	}
	if out, err := exec.Command("cp", "-a", dir, dst).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%v: %s", err, out)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.puts = append(d.puts, key)
	d.n++
	d.digests[key] = fmt.Sprintf("sha256:%064d", d.n)
	return d.digests[key], nil
}

// tamper makes the image under key another one than its writer recorded
// (as a rewrite of the store's object would).
func (d *dirImages) tamper(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.digests[key] = "tampered"
}

func (d *dirImages) Get(ctx context.Context, key, digest, dst string) error {
	if err := d.check(); err != nil {
		return err
	}
	d.mu.Lock()
	got := d.digests[key]
	d.mu.Unlock()
	if digest == "" || got != digest {
		return fmt.Errorf("%s: digest %q, %q recorded: refused", key, got, digest)
	}
	if out, err := exec.Command("cp", "-a", filepath.Join(d.root, key), dst).CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

func (d *dirImages) GetShared(ctx context.Context, key, digest, dst string) error {
	return d.Get(ctx, key, digest, dst)
}

func (d *dirImages) PutFile(ctx context.Context, path string) (string, error) {
	if err := d.check(); err != nil {
		return "", err
	}
	return "file:" + path, nil
}

func (d *dirImages) GetFile(ctx context.Context, ref string) (string, error) {
	if err := d.check(); err != nil {
		return "", err
	}
	return strings.TrimPrefix(ref, "file:"), nil
}

func (d *dirImages) Delete(ctx context.Context, key string) error {
	if err := d.check(); err != nil {
		return err
	}
	d.mu.Lock()
	d.dels = append(d.dels, key)
	d.mu.Unlock()
	return os.RemoveAll(filepath.Join(d.root, key))
}

func (d *dirImages) Unavailable(err error) bool { return errors.Is(err, errStoreDown) }

// has reports whether an image of the sandbox with key prefix "paused/<id>"
// (or a key) is in the store.
func (d *dirImages) has(prefix string) bool {
	ents, err := os.ReadDir(filepath.Join(d.root, prefix))
	if err != nil {
		_, serr := os.Stat(filepath.Join(d.root, prefix))
		return serr == nil
	}
	return len(ents) > 0
}

// twoNodes is a cluster of two managers (a, b) over one shared table and
// one image store.
type twoNodes struct {
	a, b     *sandboxtest.Env
	rtA, rtB *snapRuntime
	sh       *sharedRows
	img      *dirImages
	stores   map[string]*nodeStore
}

func newTwoNodes(t *testing.T) *twoNodes {
	t.Helper()
	c := &twoNodes{sh: &sharedRows{rows: map[string]store.Sandbox{}, owner: map[string]string{}}, img: &dirImages{root: t.TempDir(), digests: map[string]string{}},
		stores: map[string]*nodeStore{}}
	all := map[string]*sandboxtest.Store{}
	node := func(id string) (*sandboxtest.Env, *snapRuntime) {
		return snapEnvWith(t, func(cfg *sandbox.Config) {
			own := cfg.Store.(*sandboxtest.Store)
			all[id] = own
			c.stores[id] = &nodeStore{Store: own, node: id, sh: c.sh, all: all}
			cfg.Store = c.stores[id]
			cfg.Node = clusternode.Hooks(c.img, cfg.Store)
			cfg.NodeID = id
		})
	}
	c.a, c.rtA = node("a")
	c.b, c.rtB = node("b")
	return c
}

// pausedOnAAdoptedByB creates a sandbox on a, pauses it (uploading its
// image) and has b adopt it.
func (c *twoNodes) pausedOnAAdoptedByB(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	ctx := context.Background()
	sb := create(t, c.a, sandbox.CreateRequest{Timeout: time.Hour})
	if err := pauseUploaded(c.a.Manager, ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := clusternode.Adopt(ctx, c.b.Manager, c.stores["b"], sb.ID, "a"); err != nil {
		t.Fatal(err)
	}
	return sb
}

func (c *twoNodes) ownerOf(id string) string {
	c.sh.mu.Lock()
	defer c.sh.mu.Unlock()
	return c.sh.owner[id]
}

// TestMovePausedSandbox: a pause uploads the image; another node adopts
// the sandbox and resumes it under its id and token, from the image; the
// image is removed; the first node drops its copy and can neither resume
// nor kill it any more.
func TestMovePausedSandbox(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	ctx := context.Background()
	sb := create(t, c.a, sandbox.CreateRequest{Timeout: time.Hour, Secure: true})
	if err := pauseUploaded(c.a.Manager, ctx, sb.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if !c.img.has("paused/" + sb.ID) {
		t.Fatal("the pause uploaded no image")
	}

	adopted, err := clusternode.Adopt(ctx, c.b.Manager, c.stores["b"], sb.ID, "a")
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if adopted.State != sandbox.StatePaused || c.ownerOf(sb.ID) != "b" {
		t.Fatalf("adopted %+v, owner %s", adopted, c.ownerOf(sb.ID))
	}
	// Adopting again is a no-op; another node claiming it from a fails.
	if _, err := clusternode.Adopt(ctx, c.b.Manager, c.stores["b"], sb.ID, "a"); err != nil {
		t.Fatalf("second Adopt: %v", err)
	}
	// a still holds it in memory: its resume finds the row gone and drops it.
	_, err = resume(c.a.Manager, ctx, sb.ID, time.Minute)
	wantCode(t, err, http.StatusConflict, "no longer paused on this node")
	if _, err := get(c.a.Manager, sb.ID); err == nil {
		t.Fatal("a still lists the sandbox after it moved")
	}
	if c.ownerOf(sb.ID) != "b" {
		t.Fatalf("a's refused resume moved the row back to %s", c.ownerOf(sb.ID))
	}

	got, err := resume(c.b.Manager, ctx, sb.ID, time.Minute)
	if err != nil {
		t.Fatalf("resume on b: %v", err)
	}
	if got.ID != sb.ID || got.State != sandbox.StateRunning || got.AccessToken != sb.AccessToken {
		t.Fatalf("resumed on b: %+v (token %q, want %q)", got, got.AccessToken, sb.AccessToken)
	}
	waitFor(t, func() bool { return !c.img.has("paused/" + sb.ID) }, "the image removed after the resume")
	if r, _ := c.stores["b"].GetSandbox(ctx, sb.ID); r == nil || r.State != sandbox.StateRunning || strings.Contains(r.Extra, "image") {
		t.Fatalf("b's row after the resume: %+v", r)
	}
	if err := c.a.Manager.Kill(ctx, sb.ID); err == nil {
		t.Fatal("a killed a sandbox that is b's")
	}
	if err := c.b.Manager.Kill(ctx, sb.ID); err != nil {
		t.Fatalf("kill on b: %v", err)
	}
}

// TestResumeRefusesRewrittenImage: an image that is not the one the pause
// recorded in the row (its digest: the store's copy was rewritten) is not
// restored; the resume fails and the sandbox stays paused, its row and its
// image kept (security review M4).
func TestResumeRefusesRewrittenImage(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	ctx := context.Background()
	sb := create(t, c.a, sandbox.CreateRequest{Timeout: time.Hour})
	if err := pauseUploaded(c.a.Manager, ctx, sb.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	r, err := c.stores["a"].GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	var x struct{ Image, ImageDigest string }
	if err := json.Unmarshal([]byte(r.Extra), &x); err != nil || x.Image == "" || x.ImageDigest == "" {
		t.Fatalf("the paused row records image %q digest %q (%v); want both", x.Image, x.ImageDigest, err)
	}
	if _, err := clusternode.Adopt(ctx, c.b.Manager, c.stores["b"], sb.ID, "a"); err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	c.img.tamper(x.Image)
	if _, err := resume(c.b.Manager, ctx, sb.ID, time.Minute); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("resume of a rewritten image = %v, want it refused", err)
	}
	if v, err := get(c.b.Manager, sb.ID); err != nil || v.State != sandbox.StatePaused {
		t.Fatalf("after the refused resume: %+v, %v (want paused)", v, err)
	}
	if r, err := c.stores["b"].GetSandbox(ctx, sb.ID); err != nil || r.State != sandbox.StatePaused || !strings.Contains(r.Extra, x.ImageDigest) {
		t.Fatalf("b's row after the refused resume: %+v, %v", r, err)
	}
	if !c.img.has(x.Image) {
		t.Fatal("the image was removed after a refused resume")
	}
}

// TestSnapshotOnAnotherNodeVerified: a node creates from a snapshot another
// node made by fetching its image with the digest in the snapshot's row,
// and refuses an image that is not that one (security review M4).
func TestSnapshotOnAnotherNodeVerified(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	ctx := context.Background()
	src := create(t, c.a, sandbox.CreateRequest{Timeout: time.Hour})
	snap := func() string {
		info, err := c.a.Manager.CreateSnapshot(ctx, src.ID, "")
		if err != nil {
			t.Fatalf("CreateSnapshot: %v", err)
		}
		waitIdle(t, c.a.Manager, src.ID)
		return info.ID
	}
	good := snap()
	sb := create(t, c.b, sandbox.CreateRequest{TemplateID: good, Timeout: time.Minute})
	if sb.State != sandbox.StateRunning {
		t.Fatalf("created on b from a's snapshot: %+v", sb)
	}
	bad := snap()
	c.img.tamper("snapshots/" + bad)
	if _, err := c.b.Manager.Create(ctx, sandbox.CreateRequest{TemplateID: bad, Timeout: time.Minute}); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("create from a rewritten snapshot image = %v, want it refused", err)
	}
}

// TestPauseWithStoreDownKeepsRunning: an image that cannot be uploaded
// fails the pause with a 503 saying the sandbox keeps running, and it
// does (restored in place, its timer armed); the next pause works.
func TestPauseWithStoreDownKeepsRunning(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	ctx := context.Background()
	sb := create(t, c.a, sandbox.CreateRequest{Timeout: time.Hour})
	c.img.mu.Lock()
	c.img.down = true
	c.img.mu.Unlock()
	wantCode(t, pause(c.a.Manager, ctx, sb.ID), http.StatusServiceUnavailable, "the sandbox keeps running")
	got, err := get(c.a.Manager, sb.ID)
	if err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("after a failed pause: %+v, %v", got, err)
	}
	if r, _ := c.stores["a"].GetSandbox(ctx, sb.ID); r.State != sandbox.StateRunning {
		t.Fatalf("stored state after a failed pause: %q", r.State)
	}
	c.img.mu.Lock()
	c.img.down = false
	c.img.mu.Unlock()
	if err := pauseUploaded(c.a.Manager, ctx, sb.ID); err != nil {
		t.Fatalf("pause with the store back: %v", err)
	}
	// Resumed where it is: the image in the store goes.
	if _, err := resume(c.a.Manager, ctx, sb.ID, time.Minute); err != nil {
		t.Fatalf("local resume: %v", err)
	}
	waitFor(t, func() bool { return !c.img.has("paused/" + sb.ID) }, "the image removed after a local resume")
	if c.ownerOf(sb.ID) != "a" {
		t.Fatalf("owner after a local resume: %s", c.ownerOf(sb.ID))
	}
}

// TestEvacuateAndRestoreAdopted: Evacuate pauses every running sandbox
// into the store, marked evacuated (traffic resumes it); a node restarted
// with an adopted sandbox (no local files) re-attaches it.
func TestEvacuateAndRestoreAdopted(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	ctx := context.Background()
	sb := create(t, c.a, sandbox.CreateRequest{Timeout: time.Hour})
	evs := clusternode.Evacuate(ctx, c.a.Manager)
	if len(evs) != 1 || evs[0].Err != nil || evs[0].State != sandbox.StatePaused || evs[0].Was != sandbox.StateRunning || evs[0].Left < 50*time.Minute {
		t.Fatalf("Evacuate = %+v", evs)
	}
	got, _ := get(c.a.Manager, sb.ID)
	if !got.Evacuated || got.State != sandbox.StatePaused {
		t.Fatalf("evacuated sandbox %+v", got)
	}
	if _, err := clusternode.Adopt(ctx, c.b.Manager, c.stores["b"], sb.ID, "a"); err != nil {
		t.Fatal(err)
	}
	clusternode.DropMoved(ctx, c.a.Manager, c.stores["a"], slog.Default())
	if _, err := get(c.a.Manager, sb.ID); err == nil {
		t.Fatal("DropMoved kept a sandbox another node adopted")
	}
	// b restarts: a new manager over b's rows finds it paused, from the store.
	b2, _ := snapEnvWith(t, func(cfg *sandbox.Config) {
		cfg.Store = c.stores["b"]
		cfg.Node = clusternode.Hooks(c.img, cfg.Store)
		cfg.NodeID = "b"
	})
	if _, err := b2.Manager.Reattach(ctx); err != nil {
		t.Fatal(err)
	}
	live, err := b2.Manager.Lookup(sb.ID)
	if err != nil {
		t.Fatalf("restarted b lost the adopted sandbox: %v", err)
	}
	// Traffic resumes an evacuated sandbox (as with autoResume), with what
	// was left of its timeout.
	running, err := live.EnsureRunning(ctx)
	if err != nil || running.State != sandbox.StateRunning || time.Until(running.EndAt) < 50*time.Minute {
		t.Fatalf("EnsureRunning: %+v, %v", running, err)
	}
}

func waitFor(t *testing.T, f func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A node whose resume of an adopted sandbox was cut short (its daemon
// died after the network was set up) keeps the sandbox at its restart:
// paused, its image in the store (found in review: Restore deleted the row
// and orphaned the image).
func TestRestoreKeepsAdoptedAfterInterruptedResume(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	ctx := context.Background()
	sb := c.pausedOnAAdoptedByB(t)
	gate := make(chan struct{})
	c.rtB.Mu.Lock()
	c.rtB.Gate = gate
	c.rtB.Mu.Unlock()
	go func() { _, _ = resume(c.b.Manager, ctx, sb.ID, time.Minute) }()
	waitFor(t, func() bool { c.rtB.Mu.Lock(); defer c.rtB.Mu.Unlock(); return len(c.rtB.Loaded) > 0 }, "CloneSaved")
	b2, _ := snapEnvWith(t, func(cfg *sandbox.Config) { // b restarts: same rows, same namespaces
		cfg.Store, cfg.NodeID, cfg.Network = c.stores["b"], "b", c.b.Network
		cfg.Node = clusternode.Hooks(c.img, cfg.Store)
	})
	_, _ = b2.Manager.Reattach(ctx)
	_, lerr := b2.Manager.Lookup(sb.ID)
	row, gerr := c.stores["b"].GetSandbox(ctx, sb.ID)
	close(gate)
	if lerr != nil || gerr != nil {
		t.Fatalf("the restarted node lost the sandbox: %v / %v (image still stored: %v)", lerr, gerr, c.img.has("paused/"+sb.ID))
	}
	if row.State != sandbox.StatePaused || row.Slot != -1 || !c.img.has("paused/"+sb.ID) {
		t.Fatalf("after the restart: row %s slot %d, image stored %v", row.State, row.Slot, c.img.has("paused/"+sb.ID))
	}
}

// A stale copy on the node a sandbox moved away from cannot write its
// row back (found in review: a late SetTimeout upserted it to the old
// node while it ran on the new one).
func TestStaleCopyCannotTakeTheRowBack(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	ctx := context.Background()
	sb := c.pausedOnAAdoptedByB(t)
	if _, err := resume(c.b.Manager, ctx, sb.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	live, err := c.a.Manager.Lookup(sb.ID) // a's stale copy: DropMoved has not run
	if err != nil {
		t.Fatal(err)
	}
	if err := live.SetTimeout(ctx, 10*time.Minute); err == nil {
		t.Fatal("the stale copy's SetTimeout succeeded")
	}
	if o := c.ownerOf(sb.ID); o != "b" {
		t.Fatalf("row moved back to %s while the sandbox runs on b", o)
	}
	clusternode.DropMoved(ctx, c.a.Manager, c.stores["a"], slog.Default())
	if _, err := get(c.a.Manager, sb.ID); err == nil {
		t.Fatal("DropMoved kept the stale copy")
	}
}

// slowDelete delays deletes, as a store far away does.
type slowDelete struct{ *dirImages }

func (s slowDelete) Delete(ctx context.Context, key string) error {
	time.Sleep(300 * time.Millisecond)
	return s.dirImages.Delete(ctx, key)
}

// Pause, resume, pause: the removal of the first image (in the background,
// after the resume) never removes the second (found in review: both had one
// key).
func TestRepauseKeepsNewImage(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	env, _ := snapEnvWith(t, func(cfg *sandbox.Config) {
		c.stores["x"] = &nodeStore{Store: cfg.Store.(*sandboxtest.Store), node: "x", sh: c.sh, all: map[string]*sandboxtest.Store{}}
		cfg.Store = c.stores["x"]
		cfg.Node, cfg.NodeID = clusternode.Hooks(slowDelete{c.img}, cfg.Store), "x"
	})
	ctx := context.Background()
	sb := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})
	if err := pauseUploaded(env.Manager, ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := resume(env.Manager, ctx, sb.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := pauseUploaded(env.Manager, ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	row, err := c.stores["x"].GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	var x struct{ Image string }
	_ = json.Unmarshal([]byte(row.Extra), &x)
	if x.Image == "" || !c.img.has(x.Image) {
		t.Fatalf("the paused sandbox's image %q is gone from the store", x.Image)
	}
}

// pauseUploaded pauses sandbox id and waits until its image is in the
// store (the upload follows the pause's answer: upload.go).
func pauseUploaded(m *sandbox.Manager, ctx context.Context, id string) error {
	if err := pause(m, ctx, id); err != nil {
		return err
	}
	return clusternode.AwaitUpload(ctx, m, id)
}

// An adopt-and-resume of a sandbox that is this node's already, with its
// files here (the api tier's view was stale), resumes it in place: the
// node's adopt path falls back from ResumeImported to Resume.
func TestAdoptAndResumeOfOwnSandboxResumesHere(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	ctx := context.Background()
	sb := create(t, c.a, sandbox.CreateRequest{Timeout: time.Hour})
	if err := pauseUploaded(c.a.Manager, ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	live, err := c.a.Manager.Lookup(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := live.ResumeImported(ctx, time.Minute); !errors.Is(err, sandbox.ErrNotImported) {
		t.Fatalf("ResumeImported of a sandbox paused here: %v, want ErrNotImported", err)
	}
	got, err := clusternode.AdoptAndResume(ctx, c.a.Manager, c.stores["a"], nil, sb.ID, "b", time.Minute)
	if err != nil || got.State != sandbox.StateRunning || c.ownerOf(sb.ID) != "a" {
		t.Fatalf("AdoptAndResume on its own node: %+v, %v (owner %s)", got, err, c.ownerOf(sb.ID))
	}
}
