package sandbox_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

func TestCreateRefusedWhenHostDiskFull(t *testing.T) {
	t.Parallel()
	// A reserve no filesystem has: every create is refused before anything
	// is set up.
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) { c.DiskReserveMB = 1 << 40 })
	_, err := env.Manager.Create(context.Background(), sandbox.CreateRequest{Timeout: time.Minute})
	ue, ok := sandbox.AsUserError(err)
	if !ok || ue.Code != http.StatusInsufficientStorage || !strings.Contains(ue.Msg, "the host's disk is full") {
		t.Fatalf("create on a full disk: %v, want a 507 user error saying the host's disk is full", err)
	}
	if len(env.Network.TornDown) != 0 || len(env.Network.Slots) != 0 {
		t.Fatalf("a refused create set things up: network torn down %v, slots %v", env.Network.TornDown, env.Network.Slots)
	}
	if err := env.Manager.CheckHostDisk(); err == nil {
		t.Fatal("CheckHostDisk: nil on a full disk")
	}
}

func TestCreateNoSpaceIsReportedAndUndone(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) { c.DiskReserveMB = -1 })
	env.Runtime.StartErr = fmt.Errorf("mkfs.ext4: exit status 1: %w", syscall.ENOSPC)
	_, err := env.Manager.Create(context.Background(), sandbox.CreateRequest{Timeout: time.Minute})
	ue, ok := sandbox.AsUserError(err)
	if !ok || ue.Code != http.StatusInsufficientStorage || !strings.Contains(ue.Msg, "the host's disk is full") {
		t.Fatalf("create that ran out of space: %v, want a 507 user error", err)
	}
	if len(env.Network.TornDown) != 1 || len(env.Network.Slots) != 0 {
		t.Fatalf("network not torn down: %+v", env.Network.TornDown)
	}
	if rows, _ := env.Store.ListSandboxes(context.Background()); len(rows) != 0 {
		t.Fatal("row left behind")
	}
	env.Runtime.StartErr = nil
	create(t, env, sandbox.CreateRequest{}) // recovers once space is back
}
