package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	clusternode "github.com/airlock-sandbox/airlock/internal/cluster/node"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// pausedOnAAdoptedByB creates a sandbox on a, pauses it (uploading its
// image) and has b adopt it.
func pausedOnAAdoptedByB(t *testing.T, c *sandboxtest.TwoNodes) *sandbox.Sandbox {
	t.Helper()
	ctx := context.Background()
	sb := create(t, c.A, sandbox.CreateRequest{Timeout: time.Hour})
	if err := pauseUploaded(c.A.Manager, ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := clusternode.Adopt(ctx, c.B.Manager, c.Stores["b"], sb.ID, "a"); err != nil {
		t.Fatal(err)
	}
	return sb
}

// TestMovePausedSandbox: a pause uploads the image; another node adopts
// the sandbox and resumes it under its id and token, from the image; the
// image is removed; the first node drops its copy and can neither resume
// nor kill it any more.
func TestMovePausedSandbox(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	ctx := context.Background()
	sb := create(t, c.A, sandbox.CreateRequest{Timeout: time.Hour, Secure: true})
	if err := pauseUploaded(c.A.Manager, ctx, sb.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if !c.Img.Has("paused/" + sb.ID) {
		t.Fatal("the pause uploaded no image")
	}

	adopted, err := clusternode.Adopt(ctx, c.B.Manager, c.Stores["b"], sb.ID, "a")
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if adopted.State != sandbox.StatePaused || c.OwnerOf(sb.ID) != "b" {
		t.Fatalf("adopted %+v, owner %s", adopted, c.OwnerOf(sb.ID))
	}
	// Adopting again is a no-op; another node claiming it from a fails.
	if _, err := clusternode.Adopt(ctx, c.B.Manager, c.Stores["b"], sb.ID, "a"); err != nil {
		t.Fatalf("second Adopt: %v", err)
	}
	// a still holds it in memory: its resume finds the row gone and drops it.
	_, err = resume(c.A.Manager, ctx, sb.ID, time.Minute)
	wantCode(t, err, http.StatusConflict, "no longer paused on this node")
	if _, err := get(c.A.Manager, sb.ID); err == nil {
		t.Fatal("a still lists the sandbox after it moved")
	}
	if c.OwnerOf(sb.ID) != "b" {
		t.Fatalf("a's refused resume moved the row back to %s", c.OwnerOf(sb.ID))
	}

	got, err := resume(c.B.Manager, ctx, sb.ID, time.Minute)
	if err != nil {
		t.Fatalf("resume on b: %v", err)
	}
	if got.ID != sb.ID || got.State != sandbox.StateRunning || got.AccessToken != sb.AccessToken {
		t.Fatalf("resumed on b: %+v (token %q, want %q)", got, got.AccessToken, sb.AccessToken)
	}
	waitFor(t, func() bool { return !c.Img.Has("paused/" + sb.ID) }, "the image removed after the resume")
	if r, _ := c.Stores["b"].GetSandbox(ctx, sb.ID); r == nil || r.State != sandbox.StateRunning || strings.Contains(r.Extra, "image") {
		t.Fatalf("b's row after the resume: %+v", r)
	}
	if err := c.A.Manager.Kill(ctx, sb.ID); err == nil {
		t.Fatal("a killed a sandbox that is b's")
	}
	if err := c.B.Manager.Kill(ctx, sb.ID); err != nil {
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
	sb := create(t, c.A, sandbox.CreateRequest{Timeout: time.Hour})
	if err := pauseUploaded(c.A.Manager, ctx, sb.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	r, err := c.Stores["a"].GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	var x struct{ Image, ImageDigest string }
	if err := json.Unmarshal([]byte(r.Extra), &x); err != nil || x.Image == "" || x.ImageDigest == "" {
		t.Fatalf("the paused row records image %q digest %q (%v); want both", x.Image, x.ImageDigest, err)
	}
	if _, err := clusternode.Adopt(ctx, c.B.Manager, c.Stores["b"], sb.ID, "a"); err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	c.Img.Tamper(x.Image)
	if _, err := resume(c.B.Manager, ctx, sb.ID, time.Minute); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("resume of a rewritten image = %v, want it refused", err)
	}
	if v, err := get(c.B.Manager, sb.ID); err != nil || v.State != sandbox.StatePaused {
		t.Fatalf("after the refused resume: %+v, %v (want paused)", v, err)
	}
	if r, err := c.Stores["b"].GetSandbox(ctx, sb.ID); err != nil || r.State != sandbox.StatePaused || !strings.Contains(r.Extra, x.ImageDigest) {
		t.Fatalf("b's row after the refused resume: %+v, %v", r, err)
	}
	if !c.Img.Has(x.Image) {
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
	src := create(t, c.A, sandbox.CreateRequest{Timeout: time.Hour})
	snap := func() string {
		info, err := c.A.Manager.CreateSnapshot(ctx, src.ID, "")
		if err != nil {
			t.Fatalf("CreateSnapshot: %v", err)
		}
		waitIdle(t, c.A.Manager, src.ID)
		return info.ID
	}
	good := snap()
	sb := create(t, c.B, sandbox.CreateRequest{TemplateID: good, Timeout: time.Minute})
	if sb.State != sandbox.StateRunning {
		t.Fatalf("created on b from a's snapshot: %+v", sb)
	}
	bad := snap()
	c.Img.Tamper("snapshots/" + bad)
	if _, err := c.B.Manager.Create(ctx, sandbox.CreateRequest{TemplateID: bad, Timeout: time.Minute}); err == nil || !strings.Contains(err.Error(), "refused") {
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
	sb := create(t, c.A, sandbox.CreateRequest{Timeout: time.Hour})
	c.Img.SetDown(true)
	wantCode(t, pause(c.A.Manager, ctx, sb.ID), http.StatusServiceUnavailable, "the sandbox keeps running")
	got, err := get(c.A.Manager, sb.ID)
	if err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("after a failed pause: %+v, %v", got, err)
	}
	if r, _ := c.Stores["a"].GetSandbox(ctx, sb.ID); r.State != sandbox.StateRunning {
		t.Fatalf("stored state after a failed pause: %q", r.State)
	}
	c.Img.SetDown(false)
	if err := pauseUploaded(c.A.Manager, ctx, sb.ID); err != nil {
		t.Fatalf("pause with the store back: %v", err)
	}
	// Resumed where it is: the image in the store goes.
	if _, err := resume(c.A.Manager, ctx, sb.ID, time.Minute); err != nil {
		t.Fatalf("local resume: %v", err)
	}
	waitFor(t, func() bool { return !c.Img.Has("paused/" + sb.ID) }, "the image removed after a local resume")
	if c.OwnerOf(sb.ID) != "a" {
		t.Fatalf("owner after a local resume: %s", c.OwnerOf(sb.ID))
	}
}

// TestEvacuateAndRestoreAdopted: Evacuate pauses every running sandbox
// into the store, marked evacuated (traffic resumes it); a node restarted
// with an adopted sandbox (no local files) re-attaches it.
func TestEvacuateAndRestoreAdopted(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	ctx := context.Background()
	sb := create(t, c.A, sandbox.CreateRequest{Timeout: time.Hour})
	evs := clusternode.Evacuate(ctx, c.A.Manager)
	if len(evs) != 1 || evs[0].Err != nil || evs[0].State != sandbox.StatePaused || evs[0].Was != sandbox.StateRunning || evs[0].Left < 50*time.Minute {
		t.Fatalf("Evacuate = %+v", evs)
	}
	got, _ := get(c.A.Manager, sb.ID)
	if !got.Evacuated || got.State != sandbox.StatePaused {
		t.Fatalf("evacuated sandbox %+v", got)
	}
	if _, err := clusternode.Adopt(ctx, c.B.Manager, c.Stores["b"], sb.ID, "a"); err != nil {
		t.Fatal(err)
	}
	clusternode.DropMoved(ctx, c.A.Manager, c.Stores["a"], slog.Default())
	if _, err := get(c.A.Manager, sb.ID); err == nil {
		t.Fatal("DropMoved kept a sandbox another node adopted")
	}
	// b restarts: a new manager over b's rows finds it paused, from the store.
	b2, _ := sandboxtest.SnapEnv(t, func(cfg *sandbox.Config) {
		cfg.Store = c.Stores["b"]
		cfg.Node = clusternode.Hooks(c.Img, cfg.Store)
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

// A node whose resume of an adopted sandbox was cut short (its daemon
// died after the network was set up) keeps the sandbox at its restart:
// paused, its image in the store (found in review: Restore deleted the row
// and orphaned the image).
func TestRestoreKeepsAdoptedAfterInterruptedResume(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	ctx := context.Background()
	sb := pausedOnAAdoptedByB(t, c)
	gate := make(chan struct{})
	c.RtB.Mu.Lock()
	c.RtB.Gate = gate
	c.RtB.Mu.Unlock()
	resumed := make(chan struct{})
	go func() { _, _ = resume(c.B.Manager, ctx, sb.ID, time.Minute); close(resumed) }()
	// The cut-short resume ends before the test does: its last step (the
	// image's removal, Manager.dropStored) must not race b's Close.
	defer func() { <-resumed }()
	waitFor(t, func() bool { c.RtB.Mu.Lock(); defer c.RtB.Mu.Unlock(); return len(c.RtB.Loaded) > 0 }, "CloneSaved")
	b2, _ := sandboxtest.SnapEnv(t, func(cfg *sandbox.Config) { // b restarts: same rows, same namespaces
		cfg.Store, cfg.NodeID, cfg.Network = c.Stores["b"], "b", c.B.Network
		cfg.Node = clusternode.Hooks(c.Img, cfg.Store)
	})
	_, _ = b2.Manager.Reattach(ctx)
	_, lerr := b2.Manager.Lookup(sb.ID)
	row, gerr := c.Stores["b"].GetSandbox(ctx, sb.ID)
	close(gate)
	if lerr != nil || gerr != nil {
		t.Fatalf("the restarted node lost the sandbox: %v / %v (image still stored: %v)", lerr, gerr, c.Img.Has("paused/"+sb.ID))
	}
	if row.State != sandbox.StatePaused || row.Slot != -1 || !c.Img.Has("paused/"+sb.ID) {
		t.Fatalf("after the restart: row %s slot %d, image stored %v", row.State, row.Slot, c.Img.Has("paused/"+sb.ID))
	}
}

// A stale copy on the node a sandbox moved away from cannot write its
// row back (found in review: a late SetTimeout upserted it to the old
// node while it ran on the new one).
func TestStaleCopyCannotTakeTheRowBack(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	ctx := context.Background()
	sb := pausedOnAAdoptedByB(t, c)
	if _, err := resume(c.B.Manager, ctx, sb.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	live, err := c.A.Manager.Lookup(sb.ID) // a's stale copy: DropMoved has not run
	if err != nil {
		t.Fatal(err)
	}
	if err := live.SetTimeout(ctx, 10*time.Minute); err == nil {
		t.Fatal("the stale copy's SetTimeout succeeded")
	}
	if o := c.OwnerOf(sb.ID); o != "b" {
		t.Fatalf("row moved back to %s while the sandbox runs on b", o)
	}
	clusternode.DropMoved(ctx, c.A.Manager, c.Stores["a"], slog.Default())
	if _, err := get(c.A.Manager, sb.ID); err == nil {
		t.Fatal("DropMoved kept the stale copy")
	}
}

// slowDelete delays deletes, as a store far away does.
type slowDelete struct{ *sandboxtest.DirImages }

func (s slowDelete) Delete(ctx context.Context, key string) error {
	time.Sleep(300 * time.Millisecond)
	return s.DirImages.Delete(ctx, key)
}

// Pause, resume, pause: the removal of the first image (in the background,
// after the resume) never removes the second (found in review: both had one
// key).
func TestRepauseKeepsNewImage(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	env, _ := sandboxtest.SnapEnv(t, func(cfg *sandbox.Config) {
		c.Stores["x"] = sandboxtest.NewNodeStore(cfg.Store.(*sandboxtest.Store), "x", c.Sh, map[string]*sandboxtest.Store{})
		cfg.Store = c.Stores["x"]
		cfg.Node, cfg.NodeID = clusternode.Hooks(slowDelete{c.Img}, cfg.Store), "x"
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
	row, err := c.Stores["x"].GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	var x struct{ Image string }
	_ = json.Unmarshal([]byte(row.Extra), &x)
	if x.Image == "" || !c.Img.Has(x.Image) {
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
	sb := create(t, c.A, sandbox.CreateRequest{Timeout: time.Hour})
	if err := pauseUploaded(c.A.Manager, ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	live, err := c.A.Manager.Lookup(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := live.ResumeImported(ctx, time.Minute); !errors.Is(err, sandbox.ErrNotImported) {
		t.Fatalf("ResumeImported of a sandbox paused here: %v, want ErrNotImported", err)
	}
	got, err := clusternode.AdoptAndResume(ctx, c.A.Manager, c.Stores["a"], nil, sb.ID, "b", time.Minute)
	if err != nil || got.State != sandbox.StateRunning || c.OwnerOf(sb.ID) != "a" {
		t.Fatalf("AdoptAndResume on its own node: %+v, %v (owner %s)", got, err, c.OwnerOf(sb.ID))
	}
}
