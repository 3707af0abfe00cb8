package sandbox

import (
	"context"
	"errors"
	"fmt"
	"github.com/airlock-sandbox/airlock/internal/approval"
	"github.com/airlock-sandbox/airlock/internal/volume"
	"log/slog"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egressproxy"
	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/internal/guestconn"
	"github.com/airlock-sandbox/airlock/internal/jsonlog"
	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Defaults applied when Config leaves a field zero.
const (
	DefaultAgentPort         = guest.EnvdPort
	DefaultAgentReadyTimeout = 30 * time.Second
	DefaultCPUCount          = 2
	DefaultMemoryMB          = 512
	DefaultDiskSizeMB        = 10240
	DefaultMaxTimeout        = 24 * time.Hour
	DefaultMaxSlots          = 16384 // a /16 pool carved into /30 blocks
	DefaultNetNSPrefix       = "airlock-"
	DefaultUser              = "user"
	DefaultWorkdir           = "/home/user"
)

// Sandbox states.
const (
	StateRunning = "running"
	StatePaused  = "paused"
)

// EnvdVersion is the agent version reported to SDKs.
const EnvdVersion = guest.Version

// Network is the subset of the network manager the sandbox manager uses.
type Network interface {
	Setup(ctx context.Context, id string, slot int, opts network.Options) (*network.Endpoint, error)
	// Teardown removes the sandbox's netns/veth; slot may be -1 when unknown
	// (leaked namespaces found by Restore).
	Teardown(ctx context.Context, id string, slot int) error
	// ListNamespaces returns the names (or ids) of the namespaces the
	// network manager owns.
	ListNamespaces() ([]string, error)
}

// Config configures a Manager. Runtime, Network, Templates and Store are
// required.
type Config struct {
	Runtime   runtime.Runtime
	Network   Network
	Templates Templates
	Store     store.Store
	Logger    *slog.Logger

	// DataDir holds sandboxes/<id>/ runtime directories.
	DataDir string
	// HostMemAvailable reports the host's available memory in bytes
	// (default: MemAvailable of /proc/meminfo); a fork starts only the
	// children that fit in it.
	HostMemAvailable func() (int64, error)
	// Logs, when set, keeps sandbox events on disk (eventstore.go).
	Logs *jsonlog.Store
	// AgentPath is the host path of the airlock-envd binary.
	AgentPath string
	// AgentPort is the agent's port on the guest address (guest.EnvdPort).
	AgentPort int
	// AgentReadyTimeout bounds the wait for the agent's /health.
	AgentReadyTimeout time.Duration
	// Nameservers for the sandboxes' resolv.conf; default HostNameservers.
	Nameservers []string

	DefaultCPUCount   int
	DefaultMemoryMB   int
	DefaultDiskSizeMB int
	// MaxTimeout is the longest timeout a client may request.
	MaxTimeout time.Duration
	// MaxSlots is the number of network slots in the pool.
	MaxSlots int
	// NetNSPrefix is stripped from ListNamespaces names to get sandbox ids.
	NetNSPrefix string
	// HTTPClient is used to talk to agents (default: no proxy, short dials,
	// keep-alives, connections tracked by Conns).
	HTTPClient *http.Client
	// Conns tracks the host's connections to guests (shared with the
	// proxy); they are reset before a sandbox is checkpointed. Default: a
	// private tracker.
	Conns *guestconn.Tracker
	// Observer is told about creates and removals (optional).
	Observer Observer
	// Limits are the process/open-file defaults and the upper bounds of
	// create requests.
	Limits LimitConfig
	// BootSnapshots serves creates from templates' boot snapshots
	// (bootsnap.go) once PrepareBootSnapshots made them.
	BootSnapshots bool
	// WarmPool is the number of restored, unclaimed sandboxes kept per
	// template (pool.go; needs BootSnapshots).
	WarmPool map[string]int
	// AutoWarmPool names templates whose pool is sized by the daemon
	// (pool.go, poolTarget): from recent demand, up to AutoWarmPoolMax,
	// only while the host has memory to spare. WarmPool wins for a
	// template it names.
	AutoWarmPool    []string
	AutoWarmPoolMax int
	// PoolFills is how many restores of one template's pool run at once
	// (poolfill.go; 0: 2).
	PoolFills int
	// PoolMemoryReserve is host memory (HostMemAvailable) a warm pool
	// never fills into; below it the pool gives sandboxes back.
	PoolMemoryReserve uint64
	// DiskReserveMB is the free space the data directory's filesystem must
	// keep for creates, pauses and uploads (0: DefaultDiskReserveMB; < 0: only
	// a completely full disk refuses). See diskfull.go.
	DiskReserveMB int
	// Admit, when set, is asked before a create (cold or from a boot
	// snapshot or the warm pool) takes anything, with its resolved limits:
	// an error refuses the create (a cluster node at its stated capacity
	// answers 503). release is called when the create ends either way
	// (a created sandbox is counted by List by then).
	Admit func(Limits) (release func(), err error)
	// Node, on a cluster node with an artifact store and a shared store,
	// keeps paused sandboxes and named snapshots where every node can
	// fetch them and claims rows as sandboxes move between nodes
	// (NodeHooks, move.go; internal/cluster/node implements it). nil on a
	// single host.
	Node NodeHooks
	// Volumes keeps the volumes that creates mount (CreateRequest.
	// VolumeMounts, volumes.go); nil: a create with mounts is refused.
	Volumes volume.Backing
	// NodeID is this node's id in the cluster ("" on a single host).
	NodeID string
	// CABundle returns the PEM of the node's egress proxy CA, which /init
	// installs into sandboxes with network rules at create and resume
	// (cabundle.go); nil: no proxy on this node.
	CABundle func() []byte
	// EgressProxyDown, when not "", says why this node's egress proxy did
	// not start (for the log): creates and network updates with network
	// rules are then refused with 503 naming the proxy (cabundle.go),
	// never run with traffic that nothing intercepts.
	EgressProxyDown string
}

// CreateRequest describes a sandbox to create.
type CreateRequest struct {
	TemplateID string // default "base"
	// Timeout after which the sandbox is killed; must be > 0.
	Timeout  time.Duration
	Metadata map[string]string
	EnvVars  map[string]string
	// AllowInternet defaults to true when nil.
	AllowInternet *bool
	// Secure generates an envd access token.
	Secure bool
	// AutoPause asks for pause instead of kill on timeout;
	// AutoPauseDiskOnly makes that pause keep only the disk (E2B's
	// lifecycle keepMemory: false, autoPauseMemory in the create body).
	AutoPause         bool
	AutoPauseDiskOnly bool
	// RootFS, when set, is used instead of resolving TemplateID (internal:
	// the template builder runs build steps on intermediate layers).
	RootFS string
	// AutoResume lets proxied traffic resume the sandbox when it is paused.
	AutoResume bool
	// Limits overrides the daemon's default resource limits.
	Limits Limits
	// AllowPublicTraffic defaults to true when nil; false makes the proxy
	// require the sandbox's traffic access token on every port but envd's.
	AllowPublicTraffic *bool
	// Egress is the allowOut/denyOut policy (ParseEgress).
	Egress network.Egress
	// MaskRequestHost, when set, replaces the Host header of the requests
	// the proxy forwards to the sandbox; "${PORT}" in it stands for the
	// sandbox port (E2B's network.maskRequestHost, ParseMaskRequestHost).
	MaskRequestHost string
	// NetworkRules are E2B's network.rules (egressproxy.ParseRules), kept
	// with the sandbox (record.go).
	NetworkRules egressproxy.Rules
	// EgressProxy is E2B's network.egressProxy, its password sealed
	// (egressproxy.go); nil: none.
	EgressProxy *EgressProxy
	// Approval is network.approval (nil: none); Egress.Hold must be set
	// with it.
	Approval *approval.Config
	// VolumeMounts are the volumes mounted into the sandbox (E2B's
	// volumeMounts, resolved to volume ids by the API).
	VolumeMounts []volume.Mount

	trafficToken string // generated by Create when AllowPublicTraffic is false
	hidden       bool   // internal sandbox (boot snapshots): not listed, never from a snapshot
}

// publicTraffic reports whether the sandbox's ports are open without a
// traffic access token (AllowPublicTraffic unset or true).
func (r CreateRequest) publicTraffic() bool {
	return r.AllowPublicTraffic == nil || *r.AllowPublicTraffic
}

// Sandbox is a snapshot of one sandbox's state.
type Sandbox struct {
	ID            string
	TemplateID    string
	TemplateHash  string
	Alias         string
	State         string
	GuestIP       netip.Addr
	AccessToken   string
	TrafficToken  string
	Metadata      map[string]string
	EnvVars       map[string]string
	AllowInternet bool
	AllowOut      []string
	DenyOut       []string
	// MaskRequestHost: see CreateRequest.
	MaskRequestHost string
	// NetworkRules: see CreateRequest.
	NetworkRules egressproxy.Rules
	// EgressProxy: see CreateRequest.
	EgressProxy *EgressProxy
	// Approval: see CreateRequest, without the webhook secret.
	Approval *approval.Config
	// VolumeMounts: see CreateRequest.
	VolumeMounts []volume.Mount
	CPUCount     int
	MemoryMB     int
	DiskSizeMB   int
	StartedAt    time.Time
	EndAt        time.Time
	OnTimeout    string
	AutoResume   bool
	// Evacuated: paused by a drain or its node's stop (move.go); the next
	// request resumes it, as with AutoResume.
	Evacuated bool
	// Transition is "pausing" or "resuming" while one is in progress.
	Transition string
}

// Manager owns all sandboxes of this daemon. It is safe for concurrent use.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	agent *guest.Client
	// caps are cfg.Runtime's optional abilities (pause, fork, snapshots…).
	caps  runtime.Caps
	ready atomic.Bool

	// bg tracks timeout kills in flight so Close can wait for them.
	bg sync.WaitGroup
	// dead remembers why sandboxes stopped on their own (watch.go).
	dead tombstones
	// snaps tracks named snapshots in use (snapshot.go).
	snaps snapState
	// boot holds the templates' boot snapshots (bootsnap.go).
	boot bootState
	// pool holds restored, unclaimed sandboxes (pool.go).
	pool poolState
	// teardowns finishes kills in the background; creates counts the
	// creates in progress, to which they yield (teardown.go).
	teardowns teardownState
	creates   createCounter
	// kj is the teardown journal (killjournal.go, via journal()); rowDels
	// deletes killed sandboxes' rows in the background (teardown.go).
	kj      killJournal
	rowDels rowDeletes

	// mu guards sandboxes, slots and closed (the index), not the sandboxes'
	// fields: each Live has its own mu, taken after this one (live.go).
	mu        sync.Mutex
	sandboxes map[string]*Live // live (running) sandboxes by id
	slots     map[int]string   // network slot → id, including sandboxes being created or released
	closed    bool

	events *eventLog // per-sandbox lifecycle events (GET /sandboxes/{id}/logs)
}

// New validates cfg, fills defaults and returns a Manager.
func New(cfg Config) (*Manager, error) {
	if cfg.Runtime == nil || cfg.Network == nil || cfg.Templates == nil || cfg.Store == nil {
		return nil, errors.New("sandbox manager: runtime, network, templates and store are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.AgentPort == 0 {
		cfg.AgentPort = DefaultAgentPort
	}
	if cfg.AgentReadyTimeout == 0 {
		cfg.AgentReadyTimeout = DefaultAgentReadyTimeout
	}
	if len(cfg.Nameservers) == 0 {
		cfg.Nameservers = HostNameservers("/etc/resolv.conf")
	}
	if cfg.DefaultCPUCount == 0 {
		cfg.DefaultCPUCount = DefaultCPUCount
	}
	if cfg.DefaultMemoryMB == 0 {
		cfg.DefaultMemoryMB = DefaultMemoryMB
	}
	if cfg.DefaultDiskSizeMB == 0 {
		cfg.DefaultDiskSizeMB = DefaultDiskSizeMB
	}
	if cfg.MaxTimeout == 0 {
		cfg.MaxTimeout = DefaultMaxTimeout
	}
	if cfg.MaxSlots == 0 {
		cfg.MaxSlots = DefaultMaxSlots
	}
	if cfg.HostMemAvailable == nil {
		cfg.HostMemAvailable = hostMemAvailable
	}
	if cfg.NetNSPrefix == "" {
		cfg.NetNSPrefix = DefaultNetNSPrefix
	}
	if cfg.Conns == nil {
		cfg.Conns = guestconn.New(5 * time.Second)
	}
	if cfg.HTTPClient == nil {
		// Keep-alives on purpose: with "Connection: close" the agent would
		// close first and leave a TIME_WAIT endpoint in the guest, which
		// gVisor cannot checkpoint (see internal/guestconn).
		cfg.HTTPClient = &http.Client{Transport: cfg.Conns.Wrap(&http.Transport{
			Proxy:           nil,
			IdleConnTimeout: 30 * time.Second,
		}), CheckRedirect: guest.NoRedirect} // never follow the sandbox elsewhere
	}
	events := newEventLog(cfg.Logs)
	return &Manager{
		cfg:       cfg,
		log:       slog.New(events.handler(cfg.Logger.Handler())), // keeps sandbox events (events.go)
		events:    events,
		caps:      cfg.Runtime.Caps(),
		agent:     &guest.Client{HTTP: cfg.HTTPClient, Port: cfg.AgentPort},
		sandboxes: map[string]*Live{},
		slots:     map[int]string{},
	}, nil
}

// SetReady marks the daemon ready (templates available) or not.
func (m *Manager) SetReady(ready bool) { m.ready.Store(ready) }

// Ready reports whether the daemon can create sandboxes.
func (m *Manager) Ready() bool { return m.ready.Load() }

// sandboxDir is the runtime's private directory for id.
func (m *Manager) sandboxDir(id string) string {
	return filepath.Join(m.cfg.DataDir, "sandboxes", id)
}

// reserveSlot allocates the lowest free network slot for id.
func (m *Manager) reserveSlot(id string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, userErrorf(http.StatusServiceUnavailable, "server is shutting down")
	}
	for slot := 0; slot < m.cfg.MaxSlots; slot++ {
		if _, used := m.slots[slot]; !used {
			m.slots[slot] = id
			return slot, nil
		}
	}
	return 0, userErrorf(http.StatusServiceUnavailable, "no free sandbox slots (limit %d)", m.cfg.MaxSlots)
}

// List returns all live sandboxes (unordered).
func (m *Manager) List() []*Sandbox {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Sandbox, 0, len(m.sandboxes))
	for _, e := range m.sandboxes {
		if !e.hidden {
			out = append(out, e.View())
		}
	}
	return out
}

// Kill kills the live sandbox id (Lookup, then Live.Kill); the template
// builder's imagebuild.Sandboxes needs it on the manager.
func (m *Manager) Kill(ctx context.Context, id string) error {
	e, err := m.Lookup(id)
	if err != nil {
		return err
	}
	return e.Kill(ctx)
}

// CheckTimeout validates a client-supplied timeout against the daemon's
// bounds (0 ≤ d ≤ MaxTimeout).
func (m *Manager) CheckTimeout(d time.Duration) error {
	if d < 0 {
		return userErrorf(http.StatusBadRequest, "timeout must not be negative")
	}
	if d > m.cfg.MaxTimeout {
		return userErrorf(http.StatusBadRequest, "timeout cannot be greater than %d seconds", int(m.cfg.MaxTimeout.Seconds()))
	}
	return nil
}

// Close stops all timers, refuses new sandboxes and waits (bounded by ctx)
// for timeout kills already in progress and for kills' background
// teardowns. Running sandboxes are left alone
// (they are re-attached by Restore on the next start); call KillAll first to
// destroy them.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	for _, e := range m.sandboxes {
		e.mu.Lock()
		e.stopTimer()
		e.mu.Unlock()
	}
	m.mu.Unlock()
	if m.cfg.Node != nil {
		m.cfg.Node.Close(ctx) // background uploads: a restart starts them again
	}
	done := make(chan struct{})
	go func() {
		m.bg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		m.stopTeardowns()
		return fmt.Errorf("waiting for sandbox kills in progress: %w", ctx.Err())
	}
	// Kills' background teardowns finish within ctx (and closeTeardownWait);
	// what is left stays in the journal for the next start (teardown.go).
	wctx, cancel := context.WithTimeout(ctx, closeTeardownWait)
	defer cancel()
	if err := m.WaitTeardowns(wctx); err != nil {
		m.log.Info("leaving teardowns for the next start", "err", err)
	}
	m.stopTeardowns()
	m.journal().close()
	return nil
}

// background runs fn in a goroutine that Close waits for. Once Close has
// begun, fn still runs but is not waited for: a WaitGroup must not grow from
// zero while Close waits on it, so the count is taken under m.mu, which
// Close holds when it sets closed.
func (m *Manager) background(fn func()) {
	m.mu.Lock()
	tracked := !m.closed
	if tracked {
		m.bg.Add(1)
	}
	m.mu.Unlock()
	go func() {
		if tracked {
			defer m.bg.Done()
		}
		fn()
	}()
}

// KillAll kills every live sandbox and waits (bounded by ctx) for their
// teardowns.
func (m *Manager) KillAll(ctx context.Context) error {
	var errs []error
	m.leaveMovable(ctx)
	for _, sb := range m.List() {
		if err := m.Kill(ctx, sb.ID); err != nil && !IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if err := m.WaitTeardowns(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// waitAgent waits up to AgentReadyTimeout for the agent of sandbox id (its
// runtime dir and guest address) to answer /health, watching the runtime
// meanwhile: a VMM or sandbox that exits fails the wait at once with the
// runtime's reason and the tail of its console or agent log
// (runtime.WaitReady).
func (m *Manager) waitAgent(ctx context.Context, id, dir, host string) error {
	var logPath string
	if al := m.caps.AgentLogger; al != nil && dir != "" {
		logPath = al.AgentLog(dir)
	}
	hctx, cancel := context.WithTimeout(ctx, m.cfg.AgentReadyTimeout)
	defer cancel()
	return runtime.WaitReady(hctx, m.cfg.Runtime, id, logPath, 0, func(ctx context.Context) error {
		return m.agent.WaitHealthy(ctx, host)
	})
}
