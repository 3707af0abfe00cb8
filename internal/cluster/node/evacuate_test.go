package node_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	clusternode "github.com/airlock-sandbox/airlock/internal/cluster/node"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// A node without an artifact store cannot move its sandboxes: Evacuate
// (what a drain asks the node) reports each with why, so that
// `airlock node drain` says it and fails, rather than answering an empty
// list as if the node had nothing (issue 25: the drain was silent).
func TestEvacuateWithoutArtifactStoreSaysWhy(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) { c.NodeID = "n1" })
	a := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})
	b := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})
	evs := clusternode.Evacuate(context.Background(), env.Manager)
	if len(evs) != 2 {
		t.Fatalf("Evacuate without a store = %+v, want both sandboxes reported", evs)
	}
	for _, ev := range evs {
		if ev.ID != a.ID && ev.ID != b.ID {
			t.Errorf("Evacuate reported %s, not one of %s %s", ev.ID, a.ID, b.ID)
		}
		var se *sandbox.Error
		if ev.Err == nil || !errors.As(ev.Err, &se) || se.Code != http.StatusConflict ||
			!strings.Contains(ev.Err.Error(), "no artifact store") || !strings.Contains(ev.Err.Error(), ev.ID) ||
			!strings.Contains(ev.Err.Error(), "node n1") {
			t.Errorf("Evacuate of %s: err %v, want a 409 that names the sandbox, the node and the missing artifact store", ev.ID, ev.Err)
		}
		if ev.State != sandbox.StateRunning || ev.Was != sandbox.StateRunning {
			t.Errorf("Evacuate of %s: state %s (was %s), want it left running", ev.ID, ev.State, ev.Was)
		}
	}
	// Untouched: still running here.
	for _, id := range []string{a.ID, b.ID} {
		if got, err := get(env.Manager, id); err != nil || got.State != sandbox.StateRunning {
			t.Errorf("%s after Evacuate: %+v, %v", id, got, err)
		}
	}
}
