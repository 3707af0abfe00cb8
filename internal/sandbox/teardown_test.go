package sandbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// busyNetwork is the fake network whose Teardown answers EBUSY (as a
// namespace removal did in issue 26) while busy is set.
type busyNetwork struct {
	*sandboxtest.Network
	mu       sync.Mutex
	busy     bool
	attempts int
}

func (n *busyNetwork) Teardown(ctx context.Context, id string, slot int) error {
	n.mu.Lock()
	busy := n.busy
	n.attempts++
	n.mu.Unlock()
	if busy {
		return errors.New("remove /var/run/netns/x: device or resource busy")
	}
	return n.Network.Teardown(ctx, id, slot)
}

func (n *busyNetwork) setBusy(b bool) {
	n.mu.Lock()
	n.busy = b
	n.mu.Unlock()
}

func (n *busyNetwork) tries() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.attempts
}

// journal returns the ids whose teardown the journal (teardown/journal.log,
// JSON lines; a later line of an id replaces an earlier one) holds open.
func journal(t *testing.T, dataDir string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dataDir, "teardown", "journal.log"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	open := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		var r struct {
			ID   string `json:"id"`
			Done bool   `json:"done"`
		}
		if json.Unmarshal([]byte(line), &r) == nil && r.ID != "" {
			open[r.ID] = !r.Done
		}
	}
	var ids []string
	for id, o := range open {
		if o {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// A kill answers success while the network cannot be removed; the removal is
// retried in the background and done once the namespace lets go.
func TestKillAnswersWhileNetworkBusy(t *testing.T) {
	t.Parallel()
	busy := &busyNetwork{Network: sandboxtest.NewNetwork(netip.MustParseAddr("127.0.0.1"))}
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) { c.Network = busy })
	sb := create(t, env, sandbox.CreateRequest{})
	busy.setBusy(true)
	if err := env.Manager.Kill(context.Background(), sb.ID); err != nil {
		t.Fatalf("Kill with a busy namespace: %v, want success", err)
	}
	if _, err := env.Manager.Lookup(sb.ID); !sandbox.IsNotFound(err) {
		t.Fatalf("Lookup after kill: %v, want 404", err)
	}
	// The row goes in the background, without waiting for the network.
	for deadline := time.Now().Add(5 * time.Second); env.Store.Has(sb.ID); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Error("store row still there 5 s after the kill answered, while the network was busy")
			break
		}
	}
	if len(env.Manager.List()) != 0 {
		t.Error("killed sandbox still listed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := env.Manager.WaitTeardowns(ctx); err == nil {
		t.Fatal("teardown finished while the namespace was busy")
	}
	if busy.tries() < 3 {
		t.Errorf("network teardown tried %d times in 500 ms, want retries", busy.tries())
	}
	if len(journal(t, env.DataDir)) != 1 {
		t.Errorf("journal %v, want the pending teardown", journal(t, env.DataDir))
	}
	busy.setBusy(false) // the last user lets go (before the env's Close)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := env.Manager.WaitTeardowns(ctx2); err != nil {
		t.Fatal(err)
	}
	if busy.SlotOf(sb.ID) != -1 {
		t.Error("network still there after the holder let go")
	}
	if j := journal(t, env.DataDir); len(j) != 0 {
		t.Errorf("journal left: %v", j)
	}
}

// A daemon stopped before a kill's teardown finished: the next start
// finishes it from the journal, and the killed sandbox is not re-attached
// although its runtime instance still runs.
func TestKillTeardownFinishedAtNextStart(t *testing.T) {
	t.Parallel()
	busy := &busyNetwork{Network: sandboxtest.NewNetwork(netip.MustParseAddr("127.0.0.1"))}
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) { c.Network = busy })
	sb := create(t, env, sandbox.CreateRequest{})
	busy.setBusy(true)
	if err := env.Manager.Kill(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer ccancel()
	if err := env.Manager.Close(cctx); err != nil { // the teardown cannot finish: Close leaves it
		t.Fatal(err)
	}
	if len(journal(t, env.DataDir)) != 1 {
		t.Fatalf("journal %v, want the pending teardown", journal(t, env.DataDir))
	}
	busy.setBusy(false)

	m2, err := sandbox.New(sandbox.Config{
		Runtime: env.Runtime, Network: busy, Templates: env.Templates, Store: env.Store,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), DataDir: env.DataDir,
		AgentPath: "/nonexistent/airlock-envd", Nameservers: []string{"192.0.2.53"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m2.Close(context.Background()) })
	if _, err := m2.Reattach(context.Background()); err != nil {
		t.Fatalf("Reattach: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m2.WaitTeardowns(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.Lookup(sb.ID); !sandbox.IsNotFound(err) {
		t.Errorf("killed sandbox re-attached: %v", err)
	}
	if busy.SlotOf(sb.ID) != -1 {
		t.Error("network not removed at the next start")
	}
	if j := journal(t, env.DataDir); len(j) != 0 {
		t.Errorf("journal left: %v", j)
	}
}
