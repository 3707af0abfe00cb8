package node

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// memImages records what the hooks asked of the artifact store.
type memImages struct{ puts, gets, dels []string }

func (m *memImages) Put(_ context.Context, key, _ string) (string, error) {
	m.puts = append(m.puts, key)
	return "sha256:" + key, nil
}
func (m *memImages) Get(_ context.Context, key, _, _ string) error {
	m.gets = append(m.gets, key)
	return nil
}
func (m *memImages) GetShared(_ context.Context, key, _, _ string) error {
	m.gets = append(m.gets, "shared:"+key)
	return nil
}
func (m *memImages) Delete(_ context.Context, key string) error {
	m.dels = append(m.dels, key)
	return nil
}
func (m *memImages) PutFile(context.Context, string) (string, error) { return "blob", nil }
func (m *memImages) GetFile(context.Context, string) (string, error) { return "/agent", nil }
func (m *memImages) Unavailable(err error) bool                      { return errors.Is(err, errDown) }

var errDown = errors.New("down")

// moverStore is a store that is the cluster's (store.Mover).
type moverStore struct{ *sandboxtest.Store }

func (moverStore) ClaimSandbox(context.Context, string, string, string, func(*store.Sandbox) error) (*store.Sandbox, error) {
	return nil, store.ErrMoved
}
func (moverStore) AnySnapshot(context.Context, string) (*store.Snapshot, string, error) {
	return nil, "", store.ErrNotFound
}
func (moverStore) ClearSnapshotName(context.Context, string) error { return nil }

func TestHooksOnlyOnAClusterNode(t *testing.T) {
	img := &memImages{}
	if h := Hooks(nil, moverStore{sandboxtest.NewStore()}); h != nil {
		t.Errorf("no artifact store: hooks %v, want nil (a node without --artifacts moves nothing)", h)
	}
	if h := Hooks(img, sandboxtest.NewStore()); h != nil {
		t.Errorf("a single host's store: hooks %v, want nil", h)
	}
	if Hooks(img, moverStore{sandboxtest.NewStore()}) == nil {
		t.Fatal("artifact store and shared store: no hooks")
	}
}

func TestHooksKeys(t *testing.T) {
	ctx := context.Background()
	img := &memImages{}
	h := Hooks(img, moverStore{sandboxtest.NewStore()})
	k1, d1, err := h.(*hooks).storePaused(ctx, "sb1", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k2, _, _ := h.(*hooks).storePaused(ctx, "sb1", t.TempDir())
	if !strings.HasPrefix(k1, "paused/sb1/") || k1 == k2 || d1 != "sha256:"+k1 {
		t.Errorf("paused keys %q, %q (digest %q): want a new paused/sb1/<nonce> per pause", k1, k2, d1)
	}
	if _, err := h.StoreSnapshot(ctx, "snap1", t.TempDir()); err != nil {
		t.Fatal(err)
	}
	_ = h.FetchSnapshot(ctx, "snap1", "d", t.TempDir())
	_ = h.DropSnapshot(ctx, "snap1")
	_ = h.FetchPaused(ctx, k1, d1, t.TempDir())
	_ = h.DropPaused(ctx, k1)
	if got := strings.Join(img.gets, " "); got != "shared:snapshots/snap1 "+k1 {
		t.Errorf("fetched %q", got)
	}
	if got := strings.Join(img.dels, " "); got != "snapshots/snap1 "+k1 {
		t.Errorf("deleted %q", got)
	}
	if _, err := h.Claim(ctx, "sb1", "n1", "resuming", nil); !errors.Is(err, store.ErrMoved) {
		t.Errorf("Claim: %v, want the shared store's answer", err)
	}
	if !h.Unavailable(errDown) || h.Reachable(ctx) != nil {
		t.Error("Unavailable/Reachable do not answer as the artifact store does")
	}
}
