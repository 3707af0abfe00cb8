package node_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	clusternode "github.com/airlock-sandbox/airlock/internal/cluster/node"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// A pause on a cluster node answers once the checkpoint is on the node
// (issue 24): the upload to the artifact store follows. Meanwhile the row
// says uploading (not movable); once the upload is done it names the image
// and another node can resume the sandbox. On old main the pause waited for
// the upload (this test's pause timed out).
func TestPauseAnswersBeforeUpload(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	ctx := context.Background()
	sb := create(t, c.A, sandbox.CreateRequest{Timeout: time.Hour})
	release := c.Img.Hold()
	defer release()
	done := make(chan error, 1)
	go func() { done <- pause(c.A.Manager, ctx, sb.ID) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("pause: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the pause waited for the upload")
	}
	if got := c.Extra(t, "a", sb.ID); !strings.HasPrefix(got, "paused ") || !strings.Contains(got, `"uploading":true`) || strings.Contains(got, `"image":`) {
		t.Fatalf("row while uploading: %s", got)
	}
	// Not movable yet: another node cannot adopt it.
	if _, err := clusternode.Adopt(ctx, c.B.Manager, c.Stores["b"], sb.ID, "a"); err == nil {
		t.Fatal("b adopted a sandbox whose image is not in the store")
	}
	release()
	if err := clusternode.AwaitUpload(ctx, c.A.Manager, sb.ID); err != nil {
		t.Fatalf("AwaitUpload: %v", err)
	}
	if got := c.Extra(t, "a", sb.ID); strings.Contains(got, `"uploading"`) || !strings.Contains(got, `"image":"paused/`+sb.ID) {
		t.Fatalf("row after the upload: %s", got)
	}
	if _, err := clusternode.AdoptAndResume(ctx, c.B.Manager, c.Stores["b"], nil, sb.ID, "a", time.Minute); err != nil {
		t.Fatalf("resume on b after the upload: %v", err)
	}
	if c.OwnerOf(sb.ID) != "b" {
		t.Fatalf("owner after the move: %s", c.OwnerOf(sb.ID))
	}
}

// A resume on the node that paused it does not wait for the upload: it
// stops it, and no image is left in the store.
func TestResumeHereStopsUpload(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	ctx := context.Background()
	sb := create(t, c.A, sandbox.CreateRequest{Timeout: time.Hour})
	release := c.Img.Hold()
	defer release()
	if err := pause(c.A.Manager, ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err := resume(c.A.Manager, rctx, sb.ID, time.Minute)
	if err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("resume here during the upload: %+v, %v", got, err)
	}
	release()
	time.Sleep(200 * time.Millisecond)
	if c.Img.Has("paused/" + sb.ID) {
		t.Fatal("an image of the resumed sandbox is in the store")
	}
	if x := c.Extra(t, "a", sb.ID); strings.Contains(x, "uploading") || !strings.HasPrefix(x, "running") {
		t.Fatalf("row after the resume: %s", x)
	}
}

// A kill during the upload cancels it (NodeHooks.Gone): the upload the
// store holds ends at once, not when the store answers, and nothing of the
// killed sandbox lands in the store.
func TestKillCancelsUpload(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	ctx := context.Background()
	sb := create(t, c.A, sandbox.CreateRequest{Timeout: time.Hour})
	release := c.Img.Hold()
	defer release()
	if err := pause(c.A.Manager, ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return c.Img.Held() == 1 }, "the upload to reach the store")
	if err := c.A.Manager.Kill(ctx, sb.ID); err != nil {
		t.Fatalf("kill during the upload: %v", err)
	}
	waitFor(t, func() bool { return c.Img.Held() == 0 }, "the killed sandbox's upload to end")
	release()
	time.Sleep(200 * time.Millisecond)
	if c.Img.Has("paused/" + sb.ID) {
		t.Fatal("an image of the killed sandbox is in the store")
	}
}

// An evacuation (drain, stop) waits for a paused sandbox's upload, and
// reports it moved once the image is in the store; an upload that fails
// is reported as the evacuation's error for it.
func TestEvacuateWaitsForUpload(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	ctx := context.Background()
	sb := create(t, c.A, sandbox.CreateRequest{Timeout: time.Hour})
	release := c.Img.Hold()
	if err := pause(c.A.Manager, ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(300 * time.Millisecond); release() }()
	start := time.Now()
	evs := clusternode.Evacuate(ctx, c.A.Manager)
	if len(evs) != 1 || evs[0].Err != nil || evs[0].State != sandbox.StatePaused {
		t.Fatalf("Evacuate: %+v", evs)
	}
	if time.Since(start) < 250*time.Millisecond {
		t.Fatalf("Evacuate did not wait for the upload (%s)", time.Since(start))
	}
	if x := c.Extra(t, "a", sb.ID); !strings.Contains(x, `"image":"paused/`) {
		t.Fatalf("row after the evacuation: %s", x)
	}

	// With the store down, the attempt in flight fails: reported, and the
	// sandbox stays paused here.
	sb2 := create(t, c.A, sandbox.CreateRequest{Timeout: time.Hour})
	release2 := c.Img.Hold()
	if err := pause(c.A.Manager, ctx, sb2.ID); err != nil {
		t.Fatal(err)
	}
	c.Img.SetDown(true)
	go func() { time.Sleep(100 * time.Millisecond); release2() }()
	var ev clusternode.Evacuee
	for _, e := range clusternode.Evacuate(ctx, c.A.Manager) {
		if e.ID == sb2.ID {
			ev = e
		}
	}
	wantCode(t, ev.Err, http.StatusServiceUnavailable, "unreachable")
	if got, err := get(c.A.Manager, sb2.ID); err != nil || got.State != sandbox.StatePaused {
		t.Fatalf("after the failed evacuation: %+v, %v", got, err)
	}
	c.Img.SetDown(false)
	// The upload retries in the background, and gets there.
	waitFor(t, func() bool { return strings.Contains(c.Extra(t, "a", sb2.ID), `"image":"paused/`) }, "the retried upload")
}

// A daemon stopped during an upload finishes it when it starts again: the
// row said uploading, the checkpoint was kept on the node.
func TestRestartFinishesUpload(t *testing.T) {
	t.Parallel()
	c := newTwoNodes(t)
	ctx := context.Background()
	sb := create(t, c.A, sandbox.CreateRequest{Timeout: time.Hour})
	release := c.Img.Hold()
	if err := pause(c.A.Manager, ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.A.Manager.Close(cctx); err != nil { // the daemon stops: the upload is cut short
		t.Fatal(err)
	}
	release()
	if x := c.Extra(t, "a", sb.ID); !strings.Contains(x, `"uploading":true`) || strings.Contains(x, `"image":`) {
		t.Fatalf("row after the stop: %s", x)
	}
	a2, _ := sandboxtest.SnapEnv(t, func(cfg *sandbox.Config) { // a restarts: same rows, data dir, namespaces
		cfg.Store, cfg.NodeID, cfg.Network, cfg.DataDir = c.Stores["a"], "a", c.A.Network, c.A.DataDir
		cfg.Node = clusternode.Hooks(c.Img, cfg.Store)
	})
	if _, err := a2.Manager.Reattach(ctx); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	waitFor(t, func() bool { return strings.Contains(c.Extra(t, "a", sb.ID), `"image":"paused/`) }, "the upload finished after the restart")
	if _, err := clusternode.AdoptAndResume(ctx, c.B.Manager, c.Stores["b"], nil, sb.ID, "a", time.Minute); err != nil {
		t.Fatalf("resume on b: %v", err)
	}
}
