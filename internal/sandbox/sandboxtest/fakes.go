// Package sandboxtest provides in-memory fakes of the sandbox manager's
// dependencies (runtime, network, templates, store) and a fake agent, so the
// manager, the API and the proxy can be tested without root or gVisor.
package sandboxtest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Runtime is a fake runtime.Runtime.
type Runtime struct {
	// mu guards every field below.
	mu        sync.Mutex
	Specs     map[string]runtime.Spec
	States    map[string]runtime.State
	Destroyed []string
	StartErr  error
	// DieOnStart, when set, makes a started sandbox read as stopped at
	// once (a VMM that exits during boot), with DieOnStart as its
	// StopReason.
	DieOnStart string
	reasons    map[string]string
	// DestroyDelay makes Destroy slow (to test shutdown ordering).
	DestroyDelay time.Duration
}

var _ runtime.Runtime = (*Runtime)(nil)

// NewRuntime returns an empty fake runtime.
func NewRuntime() *Runtime {
	return &Runtime{Specs: map[string]runtime.Spec{}, States: map[string]runtime.State{}}
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return "fake" }

// Start implements runtime.Runtime.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.StartErr != nil {
		return r.StartErr
	}
	r.Specs[spec.ID] = spec
	r.States[spec.ID] = runtime.StateRunning
	if r.DieOnStart != "" {
		r.States[spec.ID] = runtime.StateStopped
		if r.reasons == nil {
			r.reasons = map[string]string{}
		}
		r.reasons[spec.ID] = r.DieOnStart
	}
	return nil
}

// StopReason implements runtime.StopReasoner.
func (r *Runtime) StopReason(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reasons[id]
}

// SpecOf returns the spec id was started with.
func (r *Runtime) SpecOf(id string) runtime.Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.Specs[id]
}

// SetState makes the runtime report st for id (e.g. a sandbox that died).
func (r *Runtime) SetState(id string, st runtime.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.States[id] = st
}

// Destroy implements runtime.Runtime.
func (r *Runtime) Destroy(ctx context.Context, id, dir string) error {
	r.mu.Lock()
	delay := r.DestroyDelay
	r.mu.Unlock()
	time.Sleep(delay)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.States, id)
	r.Destroyed = append(r.Destroyed, id)
	return nil
}

// State implements runtime.Runtime.
func (r *Runtime) State(ctx context.Context, id string) (runtime.State, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.States[id]
	if !ok {
		return "", runtime.ErrNotFound
	}
	return st, nil
}

// Stats implements runtime.Runtime.
func (r *Runtime) Stats(ctx context.Context, id, dir string) (runtime.Stats, error) {
	return runtime.Stats{Time: time.Now()}, nil
}

// Caps implements runtime.Runtime: the fake only says why a sandbox
// stopped; tests wrap it to add abilities (each wrapper states its own).
func (r *Runtime) Caps() runtime.Caps { return runtime.Caps{StopReasoner: r} }

// List implements runtime.Runtime.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for id := range r.States {
		out = append(out, id)
	}
	return out, nil
}

// SetDestroyDelay makes every later Destroy sleep for d.
func (r *Runtime) SetDestroyDelay(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.DestroyDelay = d
}

// Running reports whether id is running.
func (r *Runtime) Running(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.States[id] == runtime.StateRunning
}

// WasDestroyed reports whether Destroy was called for id.
func (r *Runtime) WasDestroyed(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.Destroyed {
		if d == id {
			return true
		}
	}
	return false
}

// Forget makes the runtime report id as unknown, as if its processes vanished.
func (r *Runtime) Forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.States, id)
}

// Network is a fake sandbox.Network; every guest address is GuestIP.
type Network struct {
	GuestIP netip.Addr
	// mu guards every field below.
	mu        sync.Mutex
	Slots     map[string]int // id → slot of live namespaces
	TornDown  []string
	SetupErr  error
	Namespace map[string]bool
	Policies  map[string]network.Options // id → last Setup/SetPolicy options
	Audit     map[string][]audit.Entry   // id → egress audit log (EgressLog)
	Dropped   map[string]uint64          // id → older audit entries not kept (EgressDropped)
}

// NewNetwork returns a fake network whose sandboxes all live at guest.
func NewNetwork(guest netip.Addr) *Network {
	return &Network{GuestIP: guest, Slots: map[string]int{}, Namespace: map[string]bool{}, Policies: map[string]network.Options{}}
}

// Setup implements sandbox.Network.
func (n *Network) Setup(ctx context.Context, id string, slot int, opts network.Options) (*network.Endpoint, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.SetupErr != nil {
		return nil, n.SetupErr
	}
	for other, s := range n.Slots {
		if s == slot {
			return nil, fmt.Errorf("slot %d already used by %s", slot, other)
		}
	}
	n.Slots[id] = slot
	n.Namespace[id] = true
	n.Policies[id] = opts
	return &network.Endpoint{ID: id, Slot: slot, NetNSPath: "/var/run/netns/airlock-" + id, HostIf: "al" + strconv.Itoa(slot),
		GuestIP: n.GuestIP, PrefixLen: 30}, nil
}

// Teardown implements sandbox.Network.
func (n *Network) Teardown(ctx context.Context, id string, slot int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.Slots, id)
	delete(n.Namespace, id)
	n.TornDown = append(n.TornDown, id)
	return nil
}

// SetAudit sets the egress audit log of id.
func (n *Network) SetAudit(id string, es []audit.Entry) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.Audit == nil {
		n.Audit = map[string][]audit.Entry{}
	}
	n.Audit[id] = es
}

// SetDropped sets how many older audit entries of id were dropped.
func (n *Network) SetDropped(id string, d uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.Dropped == nil {
		n.Dropped = map[string]uint64{}
	}
	n.Dropped[id] = d
}

// EgressDropped is what the network manager reports as dropped.
func (n *Network) EgressDropped(id string) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.Dropped[id]
}

// EgressLog implements sandbox.EgressLogger.
func (n *Network) EgressLog(id string, limit int) []audit.Entry {
	n.mu.Lock()
	defer n.mu.Unlock()
	es := n.Audit[id]
	if limit > 0 && limit < len(es) {
		es = es[len(es)-limit:]
	}
	return append([]audit.Entry(nil), es...)
}

// SetPolicy implements sandbox.PolicySetter.
func (n *Network) SetPolicy(ctx context.Context, id string, slot int, opts network.Options) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.Slots[id]; !ok || s != slot {
		return fmt.Errorf("%w: sandbox %s in slot %d", network.ErrNotFound, id, slot)
	}
	n.Policies[id] = opts
	return nil
}

// Policy returns the last options given for id.
func (n *Network) Policy(id string) network.Options {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.Policies[id]
}

// ListNamespaces implements sandbox.Network.
func (n *Network) ListNamespaces() ([]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for id := range n.Namespace {
		out = append(out, "airlock-"+id)
	}
	return out, nil
}

// SlotOf returns the slot of a live sandbox network (-1 if none).
func (n *Network) SlotOf(id string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.Slots[id]
	if !ok {
		return -1
	}
	return s
}

// Templates is a fake sandbox.Templates knowing a fixed set of names.
type Templates map[string]*sandbox.Template

// Resolve implements sandbox.Templates.
func (t Templates) Resolve(ctx context.Context, name string) (*sandbox.Template, error) {
	tpl, ok := t[name]
	if !ok {
		return nil, fmt.Errorf("template %q: %w", name, sandbox.ErrTemplateNotFound)
	}
	return tpl, nil
}

// Store is an in-memory store.Store.
type Store struct {
	// mu guards every field below.
	mu        sync.Mutex
	sandboxes map[string]store.Sandbox
	templates map[string]store.Template
	settings  map[string]string
	snapshots map[string]store.Snapshot
}

var _ store.Store = (*Store)(nil)
var _ store.SnapshotStore = (*Store)(nil)

// NewStore returns an empty in-memory store.
func NewStore() *Store {
	return &Store{sandboxes: map[string]store.Sandbox{}, templates: map[string]store.Template{}, settings: map[string]string{},
		snapshots: map[string]store.Snapshot{}}
}

// PutSandbox implements store.Store.
func (s *Store) PutSandbox(ctx context.Context, sb *store.Sandbox) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := *sb
	c.Metadata = maps.Clone(sb.Metadata)
	c.EnvVars = maps.Clone(sb.EnvVars)
	s.sandboxes[sb.ID] = c
	return nil
}

// GetSandbox implements store.Store.
func (s *Store) GetSandbox(ctx context.Context, id string) (*store.Sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[id]
	if !ok {
		return nil, store.ErrNotFound
	}
	return &sb, nil
}

// ListSandboxes implements store.Store.
func (s *Store) ListSandboxes(ctx context.Context) ([]*store.Sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*store.Sandbox
	for _, sb := range s.sandboxes {
		c := sb
		out = append(out, &c)
	}
	return out, nil
}

// DeleteSandbox implements store.Store.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sandboxes[id]; !ok {
		return store.ErrNotFound
	}
	delete(s.sandboxes, id)
	return nil
}

// PutTemplate implements store.Store.
func (s *Store) PutTemplate(ctx context.Context, t *store.Template) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.templates[t.Name] = *t
	return nil
}

// GetTemplate implements store.Store.
func (s *Store) GetTemplate(ctx context.Context, name string) (*store.Template, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.templates[name]
	if !ok {
		return nil, store.ErrNotFound
	}
	return &t, nil
}

// ListTemplates implements store.Store.
func (s *Store) ListTemplates(ctx context.Context) ([]*store.Template, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*store.Template
	for _, t := range s.templates {
		c := t
		out = append(out, &c)
	}
	return out, nil
}

// DeleteTemplate implements store.Store.
func (s *Store) DeleteTemplate(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.templates, name)
	return nil
}

// GetSetting implements store.Store.
func (s *Store) GetSetting(ctx context.Context, key string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.settings[key]
	if !ok {
		return "", store.ErrNotFound
	}
	return v, nil
}

// PutSetting implements store.Store.
func (s *Store) PutSetting(ctx context.Context, key, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settings[key] = value
	return nil
}

// InitSetting implements store.Store.
func (s *Store) InitSetting(ctx context.Context, key, value string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.settings[key]; ok {
		return v, nil
	}
	s.settings[key] = value
	return value, nil
}

// PutSnapshot implements store.SnapshotStore.
func (s *Store) PutSnapshot(ctx context.Context, sn *store.Snapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snapshots[sn.ID] = *sn
	return nil
}

// GetSnapshot implements store.SnapshotStore.
func (s *Store) GetSnapshot(ctx context.Context, id string) (*store.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sn, ok := s.snapshots[id]
	if !ok {
		return nil, store.ErrNotFound
	}
	return &sn, nil
}

// ListSnapshots implements store.SnapshotStore (oldest first).
func (s *Store) ListSnapshots(ctx context.Context) ([]*store.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*store.Snapshot
	for _, sn := range s.snapshots {
		c := sn
		out = append(out, &c)
	}
	slices.SortFunc(out, func(a, b *store.Snapshot) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// DeleteSnapshot implements store.SnapshotStore.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.snapshots[id]; !ok {
		return store.ErrNotFound
	}
	delete(s.snapshots, id)
	return nil
}

// Close implements store.Store.
func (s *Store) Close() error { return nil }

// Has reports whether a sandbox row exists.
func (s *Store) Has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.sandboxes[id]
	return ok
}

// InitBody is what the fake agent received on POST /init.
type InitBody struct {
	EnvVars        map[string]string `json:"envVars"`
	AccessToken    *string           `json:"accessToken"`
	Timestamp      time.Time         `json:"timestamp"`
	DefaultUser    string            `json:"defaultUser"`
	DefaultWorkdir string            `json:"defaultWorkdir"`
	CABundle       *string           `json:"caBundle"`
}

// Agent is a fake envd answering /health and /init; other paths are served by
// Extra when set.
type Agent struct {
	Server *httptest.Server
	Port   int
	// mu guards every field below.
	mu        sync.Mutex
	Unhealthy bool
	Inits     []InitBody
	Extra     http.Handler
}

// NewAgent starts a fake agent on 127.0.0.1 and closes it at test end.
func NewAgent(t testing.TB) *Agent {
	a := &Agent{}
	a.Server = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.Server.Close)
	_, port, _ := net.SplitHostPort(a.Server.Listener.Addr().String())
	a.Port, _ = strconv.Atoi(port)
	return a
}

func (a *Agent) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	unhealthy, extra := a.Unhealthy, a.Extra
	a.mu.Unlock()
	switch {
	case r.URL.Path == "/health":
		if unhealthy {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Path == "/init" && r.Method == http.MethodPost:
		var b InitBody
		data, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(data, &b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		a.Inits = append(a.Inits, b)
		a.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case extra != nil:
		extra.ServeHTTP(w, r)
	default:
		http.NotFound(w, r)
	}
}

// SetUnhealthy makes /health fail.
func (a *Agent) SetUnhealthy(v bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.Unhealthy = v
}

// LastInit returns the last /init body.
func (a *Agent) LastInit() (InitBody, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.Inits) == 0 {
		return InitBody{}, false
	}
	return a.Inits[len(a.Inits)-1], true
}

// Env bundles a manager with its fakes.
type Env struct {
	Manager   *sandbox.Manager
	Runtime   *Runtime
	Network   *Network
	Store     *Store
	Templates Templates
	Agent     *Agent
	DataDir   string
}

// NewEnv builds a Manager over fresh fakes with a "base" template and a fake
// agent on loopback. mutate may adjust the config before New.
func NewEnv(t testing.TB, mutate func(*sandbox.Config)) *Env {
	t.Helper()
	agent := NewAgent(t)
	env := &Env{
		Runtime:   NewRuntime(),
		Network:   NewNetwork(netip.MustParseAddr("127.0.0.1")),
		Store:     NewStore(),
		Templates: Templates{"base": {Name: "base", Hash: "h1", RootFS: "/nonexistent/rootfs"}},
		Agent:     agent,
		DataDir:   t.TempDir(),
	}
	cfg := sandbox.Config{
		Runtime:           env.Runtime,
		Network:           env.Network,
		Templates:         env.Templates,
		Store:             env.Store,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		DataDir:           env.DataDir,
		AgentPath:         "/nonexistent/airlock-envd",
		AgentPort:         agent.Port,
		AgentReadyTimeout: 2 * time.Second,
		Nameservers:       []string{"192.0.2.53"},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	m, err := sandbox.New(cfg)
	if err != nil {
		t.Fatalf("sandbox.New: %v", err)
	}
	m.SetReady(true)
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	env.Manager = m
	return env
}

// ErrBoom is a generic injected failure.
var ErrBoom = errors.New("boom")
