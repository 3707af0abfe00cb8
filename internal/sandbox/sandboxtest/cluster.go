package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// A two-node cluster for the move and upload tests (internal/cluster/node;
// issue 25: these fixtures were internal/sandbox's test code): one shared
// sandboxes table (SharedRows; each node's handle, NodeStore, sees only
// its rows, as internal/store/postgres does) and one artifact store in a
// directory (DirImages).

// SharedRows is the sandboxes table of a cluster's shared store: each
// row has a node, and a node's handle (NodeStore) sees only its own, as
// internal/store/postgres does.
type SharedRows struct {
	mu    sync.Mutex
	rows  map[string]store.Sandbox
	owner map[string]string
}

// NodeStore is one node's handle: sandbox rows scoped to node, the rest
// (templates, settings, snapshots) in its own Store, and
// store.Mover over the shared rows.
type NodeStore struct {
	*Store
	node string
	sh   *SharedRows
	// all is every node's snapshot store (AnySnapshot).
	all map[string]*Store
}

func (s *NodeStore) PutSandbox(ctx context.Context, sb *store.Sandbox) error {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	if o, ok := s.sh.owner[sb.ID]; ok && o != s.node {
		return store.ErrMoved // rows move only by ClaimSandbox, as in PostgreSQL
	}
	s.sh.rows[sb.ID] = *sb
	s.sh.owner[sb.ID] = s.node
	return nil
}

func (s *NodeStore) GetSandbox(ctx context.Context, id string) (*store.Sandbox, error) {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	r, ok := s.sh.rows[id]
	if !ok || s.sh.owner[id] != s.node {
		return nil, store.ErrNotFound
	}
	return &r, nil
}

func (s *NodeStore) ListSandboxes(ctx context.Context) ([]*store.Sandbox, error) {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	var out []*store.Sandbox
	for id, r := range s.sh.rows {
		if s.sh.owner[id] == s.node {
			c := r
			out = append(out, &c)
		}
	}
	return out, nil
}

func (s *NodeStore) DeleteSandbox(ctx context.Context, id string) error {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	if _, ok := s.sh.rows[id]; !ok || s.sh.owner[id] != s.node {
		return store.ErrNotFound
	}
	delete(s.sh.rows, id)
	delete(s.sh.owner, id)
	return nil
}

func (s *NodeStore) ClaimSandbox(ctx context.Context, id, from, state string, check func(*store.Sandbox) error) (*store.Sandbox, error) {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	r, ok := s.sh.rows[id]
	if !ok {
		return nil, store.ErrNotFound
	}
	if s.sh.owner[id] != from || r.State != sandbox.StatePaused || !strings.Contains(r.Extra, `"image":"`) {
		return nil, fmt.Errorf("%s on %s: %w", r.State, s.sh.owner[id], store.ErrMoved)
	}
	if check != nil {
		c := r
		if err := check(&c); err != nil {
			return nil, err
		}
	}
	if from != s.node {
		r.Slot, r.GuestIP = -1, ""
	}
	r.State = state
	s.sh.rows[id] = r
	s.sh.owner[id] = s.node
	return &r, nil
}

func (s *NodeStore) ClearSnapshotName(ctx context.Context, name string) error {
	for _, st := range s.all {
		snaps, _ := st.ListSnapshots(ctx)
		for _, sn := range snaps {
			if sn.Name == name {
				sn.Name = ""
				if err := st.PutSnapshot(ctx, sn); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (s *NodeStore) AnySnapshot(ctx context.Context, ref string) (*store.Snapshot, string, error) {
	for node, st := range s.all {
		if snap, err := st.GetSnapshot(ctx, ref); err == nil {
			return snap, node, nil
		}
	}
	return nil, "", store.ErrNotFound
}

// ErrStoreDown is the error of every DirImages call while it is down.
var ErrStoreDown = errors.New("store down")

// DirImages is internal/cluster/node.Images (the artifact store) in a
// directory; down (SetDown) makes every call fail as an unreachable store
// does.
type DirImages struct {
	root string
	mu   sync.Mutex
	down bool
	puts []string
	dels []string
	// digests are what Put returned per key (a counter: the fake's
	// "content digest"); Get refuses another, as the real store does.
	digests map[string]string
	n       int
	// gate, when set, holds every Put until it is closed (or its context
	// ends): an upload in progress.
	gate chan struct{}
	// held is how many Puts the gate holds now.
	held int
}

// Reachable answers as a reachable store does (Images.Reachable).
func (d *DirImages) Reachable(context.Context) error { return d.check() }

func (d *DirImages) check() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.down {
		return ErrStoreDown
	}
	return nil
}

func (d *DirImages) Put(ctx context.Context, key, dir string) (string, error) {
	d.mu.Lock()
	gate := d.gate
	d.mu.Unlock()
	if gate != nil {
		d.mu.Lock()
		d.held++
		d.mu.Unlock()
		defer func() {
			d.mu.Lock()
			d.held--
			d.mu.Unlock()
		}()
		select {
		case <-gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if err := d.check(); err != nil {
		return "", err
	}
	dst := filepath.Join(d.root, key)
	_ = os.RemoveAll(dst)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return "", err
	}
	if out, err := exec.Command("cp", "-a", dir, dst).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%v: %s", err, out)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.puts = append(d.puts, key)
	d.n++
	d.digests[key] = fmt.Sprintf("sha256:%064d", d.n)
	return d.digests[key], nil
}

// Tamper makes the image under key another one than its writer recorded
// (as a rewrite of the store's object would).
func (d *DirImages) Tamper(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.digests[key] = "tampered"
}

func (d *DirImages) Get(ctx context.Context, key, digest, dst string) error {
	if err := d.check(); err != nil {
		return err
	}
	d.mu.Lock()
	got := d.digests[key]
	d.mu.Unlock()
	if digest == "" || got != digest {
		return fmt.Errorf("%s: digest %q, %q recorded: refused", key, got, digest)
	}
	if out, err := exec.Command("cp", "-a", filepath.Join(d.root, key), dst).CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

func (d *DirImages) GetShared(ctx context.Context, key, digest, dst string) error {
	return d.Get(ctx, key, digest, dst)
}

func (d *DirImages) PutFile(ctx context.Context, path string) (string, error) {
	if err := d.check(); err != nil {
		return "", err
	}
	return "file:" + path, nil
}

func (d *DirImages) GetFile(ctx context.Context, ref string) (string, error) {
	if err := d.check(); err != nil {
		return "", err
	}
	return strings.TrimPrefix(ref, "file:"), nil
}

func (d *DirImages) Delete(ctx context.Context, key string) error {
	if err := d.check(); err != nil {
		return err
	}
	d.mu.Lock()
	d.dels = append(d.dels, key)
	d.mu.Unlock()
	return os.RemoveAll(filepath.Join(d.root, key))
}

func (d *DirImages) Unavailable(err error) bool { return errors.Is(err, ErrStoreDown) }

// Has reports whether an image of the sandbox with key prefix "paused/<id>"
// (or a key) is in the store.
func (d *DirImages) Has(prefix string) bool {
	ents, err := os.ReadDir(filepath.Join(d.root, prefix))
	if err != nil {
		_, serr := os.Stat(filepath.Join(d.root, prefix))
		return serr == nil
	}
	return len(ents) > 0
}

// TwoNodes is a cluster of two managers (A, B) over one shared table and
// one image store.
type TwoNodes struct {
	A, B     *Env
	RtA, RtB *SnapRuntime
	Sh       *SharedRows
	Img      *DirImages
	Stores   map[string]*NodeStore
}

// NewNodeStore is node's handle on sh over its own store own; all is every
// node's snapshot store (AnySnapshot).
func NewNodeStore(own *Store, node string, sh *SharedRows, all map[string]*Store) *NodeStore {
	return &NodeStore{Store: own, node: node, sh: sh, all: all}
}

// NewSharedRows is an empty shared sandboxes table.
func NewSharedRows() *SharedRows {
	return &SharedRows{rows: map[string]store.Sandbox{}, owner: map[string]string{}}
}

// NewDirImages is an empty artifact store in a directory of t's.
func NewDirImages(t testing.TB) *DirImages {
	return &DirImages{root: t.TempDir(), digests: map[string]string{}}
}

// SetDown makes every call of the store fail as an unreachable store's
// does (down), or answer again.
func (d *DirImages) SetDown(down bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down = down
}

// Held is how many uploads (Puts) Hold holds now: an upload whose context
// ended is not held any more.
func (d *DirImages) Held() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.held
}

// Hold makes the store hold every upload (Put) until the returned
// function is called.
func (d *DirImages) Hold() (release func()) {
	gate := make(chan struct{})
	d.mu.Lock()
	d.gate = gate
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.gate == gate {
			close(gate)
			d.gate = nil
		}
	}
}

// NewTwoNodes builds nodes "a" and "b" (SnapEnv managers) over one
// SharedRows and one DirImages; hooks makes a node's sandbox.NodeHooks
// from the image store and its store handle (internal/cluster/node.Hooks,
// which this package cannot import: that package's tests import this
// one).
func NewTwoNodes(t testing.TB, hooks func(img *DirImages, st store.Store) sandbox.NodeHooks) *TwoNodes {
	t.Helper()
	c := &TwoNodes{Sh: NewSharedRows(), Img: NewDirImages(t), Stores: map[string]*NodeStore{}}
	all := map[string]*Store{}
	node := func(id string) (*Env, *SnapRuntime) {
		return SnapEnv(t, func(cfg *sandbox.Config) {
			own := cfg.Store.(*Store)
			all[id] = own
			c.Stores[id] = NewNodeStore(own, id, c.Sh, all)
			cfg.Store = c.Stores[id]
			cfg.Node = hooks(c.Img, cfg.Store)
			cfg.NodeID = id
		})
	}
	c.A, c.RtA = node("a")
	c.B, c.RtB = node("b")
	return c
}

// OwnerOf is the node whose row sandbox id is.
func (c *TwoNodes) OwnerOf(id string) string {
	c.Sh.mu.Lock()
	defer c.Sh.mu.Unlock()
	return c.Sh.owner[id]
}

// Extra is the state and extra of sandbox id's row on node.
func (c *TwoNodes) Extra(t testing.TB, node, id string) string {
	t.Helper()
	r, err := c.Stores[node].GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatalf("row of %s: %v", id, err)
	}
	return r.State + " " + r.Extra
}
