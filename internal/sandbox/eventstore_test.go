package sandbox_test

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/jsonlog"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// TestEventsSurviveRestart: a second manager over the same store and log
// directory (a restarted daemon) re-attaches the sandbox with the events
// the first one recorded, in order, and appends after them; the logs of
// sandboxes that are gone are removed at restore, and a killed sandbox's
// log goes with it.
func TestEventsSurviveRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	logs1, err := jsonlog.Open(dir, jsonlog.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) { c.Logs = logs1 })
	sb := create(t, env, sandbox.CreateRequest{})
	if err := setTimeout(env.Manager, ctx, sb.ID, 30*time.Minute); err != nil {
		t.Fatal(err)
	}
	before, err := env.Manager.Logs(sb.ID)
	if err != nil || len(before) < 2 {
		t.Fatalf("logs before: %+v, %v", before, err)
	}
	_ = env.Manager.Close(ctx)
	_ = logs1.Close()

	logs2, err := jsonlog.Open(dir, jsonlog.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer logs2.Close()
	stale := logs2.Log("igone.events")
	stale.Append(map[string]string{"msg": "of a sandbox destroyed while the daemon was down"})
	stale.Sync()
	m2, err := sandbox.New(sandbox.Config{Runtime: env.Runtime, Network: env.Network, Templates: env.Templates,
		Store: env.Store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), DataDir: env.DataDir,
		AgentPath: "/nonexistent/airlock-envd", AgentPort: env.Agent.Port, AgentReadyTimeout: 2 * time.Second,
		Nameservers: []string{"192.0.2.53"}, Logs: logs2})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close(ctx)
	rep, err := m2.Reattach(ctx)
	if err != nil || len(rep.Reattached) != 1 {
		t.Fatalf("restore: %+v, %v", rep, err)
	}
	after, err := m2.Logs(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) <= len(before) || !reflect.DeepEqual(after[:len(before)], before) {
		t.Fatalf("after restart:\n got %+v\nwant %+v then the re-attach", after, before)
	}
	if last := after[len(after)-1]; last.Message != "sandbox re-attached" {
		t.Errorf("newest event after restart = %q, want sandbox re-attached", last.Message)
	}
	if names, _ := logs2.Names(); len(names) != 1 || names[0] != sb.ID+".events" {
		t.Errorf("logs after restore = %v, want only %s.events (the stale one removed)", names, sb.ID)
	}
	if m2.LogsDropped(sb.ID) != 0 {
		t.Errorf("dropped = %d", m2.LogsDropped(sb.ID))
	}

	if err := m2.Kill(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) { // removed after the answer
		names, _ := logs2.Names()
		if len(names) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("logs 5 s after kill = %v, want none", names)
			break
		}
	}
	// The removed sandbox's events are still answered from memory.
	if es, err := m2.Logs(sb.ID); err != nil || es[len(es)-1].Message != "sandbox killed" {
		t.Errorf("logs after kill: %+v, %v", es, err)
	}
}
