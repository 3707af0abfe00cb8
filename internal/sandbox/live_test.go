package sandbox_test

import (
	"context"
	"time"

	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// The per-sandbox operations are methods of the live sandbox a caller
// looks up (Manager.Lookup); these helpers do both, as a handler does.

func get(m *sandbox.Manager, id string) (*sandbox.Sandbox, error) { return sandboxtest.Get(m, id) }

func setTimeout(m *sandbox.Manager, ctx context.Context, id string, d time.Duration) error {
	e, err := m.Lookup(id)
	if err != nil {
		return err
	}
	return e.SetTimeout(ctx, d)
}

func refresh(m *sandbox.Manager, ctx context.Context, id string, d time.Duration) error {
	e, err := m.Lookup(id)
	if err != nil {
		return err
	}
	return e.Refresh(ctx, d)
}

func connectTo(m *sandbox.Manager, ctx context.Context, id string, d time.Duration) (*sandbox.Sandbox, bool, error) {
	e, err := m.Lookup(id)
	if err != nil {
		return nil, false, err
	}
	return e.Connect(ctx, d)
}

func pause(m *sandbox.Manager, ctx context.Context, id string) error {
	e, err := m.Lookup(id)
	if err != nil {
		return err
	}
	return e.Pause(ctx)
}

func pauseFilesystem(m *sandbox.Manager, ctx context.Context, id string) error {
	e, err := m.Lookup(id)
	if err != nil {
		return err
	}
	return e.PauseFilesystem(ctx)
}

func resume(m *sandbox.Manager, ctx context.Context, id string, d time.Duration) (*sandbox.Sandbox, error) {
	e, err := m.Lookup(id)
	if err != nil {
		return nil, err
	}
	return e.Resume(ctx, d)
}

func ensureRunning(m *sandbox.Manager, ctx context.Context, id string) (*sandbox.Sandbox, error) {
	e, err := m.Lookup(id)
	if err != nil {
		return nil, err
	}
	return e.EnsureRunning(ctx)
}

func setNetwork(m *sandbox.Manager, ctx context.Context, id string, allowInternet bool, eg network.Egress) error {
	e, err := m.Lookup(id)
	if err != nil {
		return err
	}
	return e.SetNetwork(ctx, sandbox.NetworkUpdate{AllowInternet: allowInternet, Egress: eg})
}
