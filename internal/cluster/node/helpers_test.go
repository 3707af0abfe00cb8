package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clusternode "github.com/airlock-sandbox/airlock/internal/cluster/node"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// The move and upload tests run two sandbox managers on sandboxtest's
// fakes (sandboxtest.TwoNodes) with this package's hooks. The helpers
// below look a sandbox up and act on it, as a handler does.

func newTwoNodes(t *testing.T) *sandboxtest.TwoNodes {
	t.Helper()
	return sandboxtest.NewTwoNodes(t, func(img *sandboxtest.DirImages, st store.Store) sandbox.NodeHooks {
		return clusternode.Hooks(img, st)
	})
}

func create(t *testing.T, env *sandboxtest.Env, req sandbox.CreateRequest) *sandbox.Sandbox {
	t.Helper()
	if req.Timeout == 0 {
		req.Timeout = time.Minute
	}
	sb, err := env.Manager.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return sb
}

func get(m *sandbox.Manager, id string) (*sandbox.Sandbox, error) { return sandboxtest.Get(m, id) }

func pause(m *sandbox.Manager, ctx context.Context, id string) error {
	e, err := m.Lookup(id)
	if err != nil {
		return err
	}
	return e.Pause(ctx)
}

func resume(m *sandbox.Manager, ctx context.Context, id string, d time.Duration) (*sandbox.Sandbox, error) {
	e, err := m.Lookup(id)
	if err != nil {
		return nil, err
	}
	return e.Resume(ctx, d)
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

func wantCode(t *testing.T, err error, code int, substr string) {
	t.Helper()
	ue, ok := sandbox.AsUserError(err)
	if !ok || ue.Code != code || !strings.Contains(ue.Msg, substr) {
		t.Fatalf("error = %v, want %d containing %q", err, code, substr)
	}
}

// waitIdle waits until id has no operation in progress.
func waitIdle(t *testing.T, m *sandbox.Manager, id string) *sandbox.Sandbox {
	t.Helper()
	return sandboxtest.WaitIdle(t, m, id)
}
