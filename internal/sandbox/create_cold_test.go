package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

func TestCreateInsecureSendsNoToken(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	sb := create(t, env, sandbox.CreateRequest{})
	if sb.AccessToken != "" {
		t.Fatalf("token %q for insecure sandbox", sb.AccessToken)
	}
	init, _ := env.Agent.LastInit()
	if init.AccessToken != nil {
		t.Fatalf("init carried token %q", *init.AccessToken)
	}
}

func TestCreateFailureUndoes(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	env.Runtime.StartErr = sandboxtest.ErrBoom
	_, err := env.Manager.Create(context.Background(), sandbox.CreateRequest{Timeout: time.Minute})
	if err == nil || !errors.Is(err, sandboxtest.ErrBoom) {
		t.Fatalf("err = %v, want wrapped boom", err)
	}
	if _, user := sandbox.AsUserError(err); user {
		t.Fatal("runtime failure reported as user error")
	}
	if len(env.Network.TornDown) != 1 || len(env.Network.Slots) != 0 {
		t.Fatalf("network not torn down: %+v", env.Network.TornDown)
	}
	if rows, _ := env.Store.ListSandboxes(context.Background()); len(rows) != 0 {
		t.Fatal("row left behind")
	}
	// The slot is free again.
	env.Runtime.StartErr = nil
	sb := create(t, env, sandbox.CreateRequest{})
	if env.Network.SlotOf(sb.ID) != 0 {
		t.Fatalf("slot = %d, want 0", env.Network.SlotOf(sb.ID))
	}
}

func TestCreateAgentNeverHealthy(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) { c.AgentReadyTimeout = 300 * time.Millisecond })
	env.Agent.SetUnhealthy(true)
	start := time.Now()
	_, err := env.Manager.Create(context.Background(), sandbox.CreateRequest{Timeout: time.Minute})
	if err == nil {
		t.Fatal("create succeeded with unhealthy agent")
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("took %v, deadline not honoured", el)
	}
	if len(env.Runtime.Destroyed) != 1 || len(env.Network.TornDown) != 1 {
		t.Fatal("failed create not cleaned up")
	}
}

// A sandbox whose VMM exits during boot fails the create at once with the
// runtime's reason, not after the agent timeout.
func TestCreateRuntimeDiesBeforeAgent(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) { c.AgentReadyTimeout = 20 * time.Second })
	env.Agent.SetUnhealthy(true)
	env.Runtime.DieOnStart = "its virtual machine exited"
	start := time.Now()
	_, err := env.Manager.Create(context.Background(), sandbox.CreateRequest{Timeout: time.Minute})
	if err == nil {
		t.Fatal("create succeeded although the sandbox stopped")
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("took %v: the stop was not noticed while waiting for the agent", el)
	}
	var se *runtime.StoppedError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "its virtual machine exited") {
		t.Fatalf("err = %v, want a runtime.StoppedError with the stop reason", err)
	}
	if len(env.Runtime.Destroyed) != 1 || len(env.Network.TornDown) != 1 {
		t.Fatal("failed create not cleaned up")
	}
}
