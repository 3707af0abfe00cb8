package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/clustertls"
	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/proxy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// cpuOvercommit is how many sandbox CPUs a node states per host CPU: a
// sandbox's CPUs are a cgroup share and a ceiling, not a reservation, and
// most sandboxes idle (E2B overcommits the same way).
const cpuOvercommit = 4

// Node is a --role node daemon's side of the cluster: it guards the
// node's HTTP stack (mutual TLS and the cluster secret), stamps responses with the node
// id and creates with the heartbeat generation that counts them, and
// heartbeats the node's capacity and load into the nodes table.
type Node struct {
	cfg Config
	log *slog.Logger
	cs  cluster.Store
	// mgr, templates and the runtime's name and accelerator are set by
	// Attach, before the node serves or admits anything.
	mgr       *sandbox.Manager
	templates Templates
	runtime   string
	kvm       bool
	// gen is the generation of the last heartbeat sampled (placement.Node.Gen).
	gen     atomic.Uint64
	started time.Time
	// beatMu serialises heartbeats (the ticker's and beatNow's); failing,
	// under it, is set while heartbeats fail (logged once per outage).
	beatMu  sync.Mutex
	failing bool
	// beaten is set after the first heartbeat written (under beatMu).
	beaten bool
	// lastState is the node's state as its last heartbeat read it.
	lastState atomic.Value
	// registered is set once the node heartbeats (it is ready).
	registered atomic.Bool

	// admitMu guards admitting: the resources of creates admitted and not
	// yet ended (admit).
	admitMu        sync.Mutex
	admitting      sandbox.Limits
	admittingCount int
}

// Config is what a node is, fixed when the daemon starts.
type Config struct {
	// ID, Advertise and Labels are the node's identity (--node-id,
	// --advertise-addr, --node-labels).
	ID, Advertise string
	Labels        []string
	// Secret is the cluster secret and TLS the node's certificate and the
	// cluster CA: the api tier's requests carry both.
	Secret string
	TLS    *clustertls.Material
	// CPUs and MemoryMB are the capacity the node states (--node-cpus,
	// --node-memory-mb; CPUs <= 0: the host's CPUs × cpuOvercommit);
	// MaxSandboxes is how many sandboxes its subnet holds.
	CPUs, MemoryMB, MaxSandboxes int
	// DataDir is the daemon's data directory (the drain-on-stop marker).
	DataDir string
	// Store is the daemon's store: the cluster's tables (cluster.Store).
	Store store.Store
	// Movable: the node has an artifact store, so its sandboxes can move
	// (drain on stop pauses them into it).
	Movable bool
	// EachBeat, when set, runs after every heartbeat of the loop (the
	// daemon refreshes the cluster's blocked addresses).
	EachBeat func(ctx context.Context)
	// Arriving, when set, is told a sandbox is about to be adopted from
	// another node (the activity feed numbers its entries past the old
	// node's: activity.Hub.Arriving).
	Arriving func(id string)
	Log      *slog.Logger
}

// Templates lists the templates on the node's disk (template.Manager).
type Templates interface {
	List(ctx context.Context) ([]*template.Template, error)
}

// New makes a node's state; Attach gives it the sandbox manager.
func New(cfg Config) *Node {
	cs, _ := cfg.Store.(cluster.Store) // the daemon required a PostgreSQL store
	n := &Node{cfg: cfg, log: cfg.Log, cs: cs, started: time.Now()}
	// Generations must grow across restarts too: the api tier ignores a
	// heartbeat older than one it has seen. Counting from the start time
	// in milliseconds does it (a node heartbeats far less than once a
	// millisecond).
	n.gen.Store(uint64(n.started.UnixMilli()))
	return n
}

// Attach gives the node what it samples and serves: the sandbox manager,
// the templates, and the runtime's name and whether it runs on KVM. It is
// called once, before the node serves or admits a create.
func (n *Node) Attach(mgr *sandbox.Manager, tm Templates, runtime string, kvm bool) {
	n.mgr, n.templates, n.runtime, n.kvm = mgr, tm, runtime, kvm
}

// Shared reports whether the store has the cluster's tables.
func (n *Node) Shared() bool { return n.cs != nil }

// capacity is what the node states it lets sandboxes hold.
func (n *Node) capacity() (cpus, memoryMB, sandboxes int) {
	cpus, memoryMB = n.cfg.CPUs, n.cfg.MemoryMB
	if cpus <= 0 {
		cpus = goruntime.NumCPU() * cpuOvercommit
	}
	return cpus, memoryMB, n.cfg.MaxSandboxes
}

// held sums what the node's sandboxes hold: CPUs and memory of the running
// ones (a paused one holds disk only) and the count of all.
func (n *Node) held() (cpus, memoryMB, count int) {
	for _, sb := range n.mgr.List() {
		count++
		if sb.State == sandbox.StateRunning {
			cpus += sb.CPUCount
			memoryMB += sb.MemoryMB
		}
	}
	return cpus, memoryMB, count
}

// Admit is the node's own check of a create (sandbox.Config.Admit): the
// api tier places within the capacity the node states, but each api
// instance counts only its own creates in flight, so the node refuses one
// that would take it past that capacity (503, and the api tier's caller
// retries). Creates admitted and not yet registered count too.
func (n *Node) Admit(l sandbox.Limits) (func(), error) {
	n.admitMu.Lock()
	defer n.admitMu.Unlock()
	capCPU, capMem, capCount := n.capacity()
	cpus, mem, count := n.held()
	cpus += n.admitting.CPUCount
	mem += n.admitting.MemoryMB
	switch {
	case cpus+l.CPUCount > capCPU:
		return nil, &sandbox.Error{Code: http.StatusServiceUnavailable, Msg: fmt.Sprintf(
			"node %s is full: %d of %d CPUs held, the sandbox needs %d", n.cfg.ID, cpus, capCPU, l.CPUCount)}
	case mem+l.MemoryMB > capMem:
		return nil, &sandbox.Error{Code: http.StatusServiceUnavailable, Msg: fmt.Sprintf(
			"node %s is full: %d of %d MiB memory held, the sandbox needs %d", n.cfg.ID, mem, capMem, l.MemoryMB)}
	case count+n.admittingCount >= capCount:
		return nil, &sandbox.Error{Code: http.StatusServiceUnavailable, Msg: fmt.Sprintf(
			"node %s is full: %d sandboxes", n.cfg.ID, count)}
	}
	n.admitting.CPUCount += l.CPUCount
	n.admitting.MemoryMB += l.MemoryMB
	n.admittingCount++
	var once sync.Once
	return func() {
		once.Do(func() {
			n.admitMu.Lock()
			n.admitting.CPUCount -= l.CPUCount
			n.admitting.MemoryMB -= l.MemoryMB
			n.admittingCount--
			n.admitMu.Unlock()
		})
	}, nil
}

// Guard refuses every request, except GET /health of the node itself
// (probes), that does not come over TLS with the api tier's client
// certificate (clustertls.APIClient: it chains to the cluster CA and names
// airlock:api, so another node's certificate is refused) and with the
// cluster secret (a second factor). The secret is removed before the
// request goes on, so it never reaches a sandbox.
func (n *Node) Guard(next http.Handler) http.Handler {
	id := n.cfg.ID
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(cluster.HeaderNode, id)
		if !n.public(r) {
			if n.cfg.TLS == nil || !clustertls.APIClient(n.cfg.TLS.Roots, r.TLS) {
				middleware.WriteError(w, http.StatusUnauthorized,
					"this is an Airlock cluster node: requests come through the api tier (no api-tier client certificate of the cluster CA)")
				return
			}
			if !cluster.SecretValid(n.cfg.Secret, r.Header.Get(cluster.HeaderSecret)) {
				middleware.WriteError(w, http.StatusUnauthorized,
					"this is an Airlock cluster node: requests come through the api tier (missing or wrong cluster secret)")
				return
			}
			r.Header.Del(cluster.HeaderSecret)
			// The hop's TLS is not the client's: the scheme the client used
			// is the api tier's X-Forwarded-Proto (found by the cluster's
			// template build: a file upload link came back https://).
			r = r.WithContext(r.Context())
			r.TLS = nil
			if r.Header.Get(cluster.HeaderInternal) != "" {
				// The api tier's own call (it strips the header from what it
				// forwards): never a client's, never sandbox traffic.
				r.Header.Del(cluster.HeaderInternal)
				n.internal(w, r)
				return
			}
		}
		if r.Method == http.MethodPost && (r.URL.Path == "/sandboxes" || r.URL.Path == "/v2/sandboxes") &&
			r.Header.Get(proxy.HeaderSandboxID) == "" {
			w = &genWriter{ResponseWriter: w, gen: &n.gen}
		}
		next.ServeHTTP(w, r)
	})
}

// public: the node's own GET /health (not a sandbox's, by header or host).
func (n *Node) public(r *http.Request) bool {
	if r.Method != http.MethodGet || r.URL.Path != "/health" || r.Header.Get(proxy.HeaderSandboxID) != "" {
		return false
	}
	_, _, sandboxHost := proxy.ParseSandboxHost(r.Host)
	return !sandboxHost
}

// genWriter stamps a create's response with the generation of the first
// heartbeat that will count the new sandbox: the current generation + 1,
// read when the response starts (the sandbox is registered by then), and a
// heartbeat bumps the generation before it samples.
type genWriter struct {
	http.ResponseWriter
	gen   *atomic.Uint64
	wrote bool
}

func (g *genWriter) WriteHeader(code int) {
	if !g.wrote {
		g.wrote = true
		g.Header().Set(cluster.HeaderGen, strconv.FormatUint(g.gen.Load()+1, 10))
	}
	g.ResponseWriter.WriteHeader(code)
}

func (g *genWriter) Write(b []byte) (int, error) {
	if !g.wrote {
		g.WriteHeader(http.StatusOK)
	}
	return g.ResponseWriter.Write(b)
}

func (g *genWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// Run heartbeats every cluster.HeartbeatInterval until ctx ends. It starts
// once the node is ready (its default templates exist), so the api tier
// never places a sandbox on a node that cannot start it.
func (n *Node) Run(ctx context.Context) {
	if n.cs == nil {
		n.log.Error("cluster node: the store has no cluster tables; not registering")
		return
	}
	n.log.Info("cluster node: registering", "node", n.cfg.ID, "advertise", n.cfg.Advertise, "labels", n.cfg.Labels)
	t := time.NewTicker(cluster.HeartbeatInterval)
	defer t.Stop()
	n.registered.Store(true)
	// Paused sandboxes another node adopted are dropped here (their rows
	// left this node's scope); not in the heartbeat, which must stay fast.
	go n.runDropMoved(ctx, dropMovedInterval)
	for {
		n.beat(ctx)
		if n.cfg.EachBeat != nil {
			n.cfg.EachBeat(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// beat samples the node and writes one heartbeat; a node the api tier
// marked lost reconciles first.
func (n *Node) beat(ctx context.Context) {
	n.beatMu.Lock()
	defer n.beatMu.Unlock()
	hb := n.sample(ctx)
	bctx, cancel := context.WithTimeout(ctx, cluster.HeartbeatInterval*2)
	defer cancel()
	state, err := n.cs.Heartbeat(bctx, hb)
	if err != nil {
		if !n.failing && ctx.Err() == nil {
			n.log.Warn("cluster node: heartbeat failed (retrying)", "err", err)
		}
		n.failing = true
		return
	}
	if n.failing {
		n.log.Info("cluster node: heartbeat written again")
		n.failing = false
	}
	if state == cluster.StateLost {
		n.reconcile(ctx)
	}
	if !n.beaten {
		n.beaten = true
		n.undrainAfterStop(ctx, state)
	}
	n.lastState.Store(state)
}

// sample is the node's heartbeat: capacity, what its sandboxes hold, the
// templates on its disk and its warm pool.
func (n *Node) sample(ctx context.Context) cluster.Node {
	capCPU, capMem, capCount := n.capacity()
	hb := cluster.Node{
		ID: n.cfg.ID, Addr: n.cfg.Advertise, Runtime: n.runtime, Labels: slices.Clone(n.cfg.Labels),
		Gen:  n.gen.Add(1), // before sampling: see genWriter
		CPUs: capCPU, MemoryMB: capMem, MaxSandboxes: capCount,
		WarmPool:  n.mgr.WarmPoolSizes(),
		StartedAt: n.started,
	}
	if n.kvm && !slices.Contains(hb.Labels, "kvm") {
		hb.Labels = append(hb.Labels, "kvm")
	}
	hb.ReservedCPUs, hb.ReservedMemoryMB, hb.Sandboxes = n.held()
	if ts, err := n.templates.List(ctx); err == nil {
		for _, t := range ts {
			hb.Templates = append(hb.Templates, t.Name)
			if !slices.Contains(hb.Templates, t.Hash) {
				hb.Templates = append(hb.Templates, t.Hash)
			}
		}
	}
	return hb
}

// reconcile runs when the api tier marked this node lost (its heartbeats
// stopped for longer than cluster.LostAfter, e.g. cut off from the
// database): the api tier then reported the running sandboxes gone and
// removed their rows. A sandbox still alive here without its row is killed,
// so no sandbox is ever served twice; then the node is live again.
func (n *Node) reconcile(ctx context.Context) {
	killed, failed := 0, 0
	for _, sb := range n.mgr.List() {
		// Gone: its row was removed, or it is recorded lost (a row the node
		// wrote back before this heartbeat, e.g. an automatic pause, does not
		// make it ours again: the api tier already reported it gone).
		_, err := n.cfg.Store.GetSandbox(ctx, sb.ID)
		_, lostErr := n.cs.LostSandbox(ctx, sb.ID)
		if !errors.Is(err, store.ErrNotFound) && lostErr != nil {
			continue
		}
		live, err := n.mgr.Lookup(sb.ID)
		if err != nil {
			continue
		}
		if err := live.Kill(ctx); err != nil {
			n.log.Warn("cluster node: killing a sandbox lost with this node", "sandbox", sb.ID, "err", err)
			failed++
			continue
		}
		killed++
	}
	if failed > 0 { // stay lost (no creates here); the next heartbeat tries again
		n.log.Warn("cluster node: this node was marked lost and could not kill every sandbox reported lost; staying lost", "failed", failed)
		return
	}
	if err := n.cs.SetNodeState(ctx, n.cfg.ID, cluster.StateLive); err != nil {
		n.log.Warn("cluster node: marking the node live again", "err", err)
		return
	}
	n.log.Warn("cluster node: this node had been marked lost; reconciled and live again", "killed_lost_sandboxes", killed)
}

// BeatNow heartbeats at once, when the node's templates changed: a
// template a build just recorded is in the nodes table before the build's
// answer ends, so the create a client sends next is placed here.
func (n *Node) BeatNow() {
	if !n.registered.Load() || n.cs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cluster.HeartbeatInterval)
	defer cancel()
	n.beat(ctx)
}

// TemplateRecords is the template manager's store on a node: a template
// record written or removed is heartbeated at once (Node.BeatNow as
// changed).
type TemplateRecords struct {
	store.Store
	Changed func()
}

func (t TemplateRecords) PutTemplate(ctx context.Context, rec *store.Template) error {
	err := t.Store.PutTemplate(ctx, rec)
	if err == nil {
		t.Changed()
	}
	return err
}

func (t TemplateRecords) DeleteTemplate(ctx context.Context, name string) error {
	err := t.Store.DeleteTemplate(ctx, name)
	if err == nil {
		t.Changed()
	}
	return err
}

// Trusted is, on a node, the check of a request the api tier authenticated
// (api.Options.Trusted): the node's guard let only requests with the
// cluster secret in, and the api tier sets cluster.HeaderAuthenticated on
// those whose API key it checked (and removes it from all others).
func Trusted(r *http.Request) bool { return r.Header.Get(cluster.HeaderAuthenticated) != "" }

// KeepAlive touches the node's row (cluster.Store.Touch) from the moment
// its store is open until its first full heartbeat: a node restarting with
// sandboxes to re-attach must not be marked lost while it restores them
// (the api tier would report them gone and the node's restore destroy
// them). A new node has no row yet: nothing happens.
func (n *Node) KeepAlive(ctx context.Context) {
	if n.cs == nil {
		return
	}
	t := time.NewTicker(cluster.HeartbeatInterval)
	defer t.Stop()
	for !n.registered.Load() {
		tctx, cancel := context.WithTimeout(ctx, cluster.HeartbeatInterval)
		if err := n.cs.Touch(tctx, n.cfg.ID); err != nil && ctx.Err() == nil {
			n.log.Debug("cluster node: touching the node's row", "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// internal serves the node API only the api tier calls
// (cluster.InternalPrefix): adopting a paused sandbox from another node,
// and evacuating this one.
func (n *Node) internal(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, cluster.InternalPrefix)
	seg := strings.Split(path, "/")
	switch {
	case r.Method == http.MethodPost && path == "evacuate":
		n.serveEvacuate(w, r)
	case r.Method == http.MethodPost && len(seg) == 3 && seg[0] == "sandboxes" && seg[2] == "adopt":
		n.serveAdopt(w, r, seg[1])
	case r.Method == http.MethodPost && len(seg) == 3 && seg[0] == "sandboxes" && seg[2] == "uploaded":
		n.serveUploaded(w, r, seg[1])
	case r.Method == http.MethodPost && len(seg) == 3 && seg[0] == "sandboxes" && seg[2] == "drop":
		DropIfMoved(r.Context(), n.mgr, n.cfg.Store, seg[1])
		w.WriteHeader(http.StatusNoContent)
	default:
		middleware.WriteError(w, http.StatusNotFound, "no such node API")
	}
}

// writeSandboxError answers err: a user error with its status, another
// with 500.
func (n *Node) writeSandboxError(w http.ResponseWriter, err error) {
	if ue, ok := sandbox.AsUserError(err); ok {
		middleware.WriteError(w, ue.Code, ue.Msg)
		return
	}
	n.log.Error("cluster node API", "err", err)
	middleware.WriteError(w, http.StatusInternalServerError, err.Error())
}

func (n *Node) serveAdopt(w http.ResponseWriter, r *http.Request, id string) {
	var req cluster.AdoptRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil || req.From == "" {
		middleware.WriteError(w, http.StatusBadRequest, "want {\"from\": \"<node>\"}")
		return
	}
	if !n.cfg.Movable { // as sandbox.Manager.ClaimAdopted answers, before it looks for the sandbox here
		middleware.WriteError(w, http.StatusNotImplemented, "this daemon does not move sandboxes (no artifact store or shared store)")
		return
	}
	if n.cfg.Arriving != nil {
		n.cfg.Arriving(id)
	}
	var (
		sb  *sandbox.Sandbox
		err error
	)
	if req.Resume {
		timeout := time.Duration(req.TimeoutMs) * time.Millisecond
		if timeout <= 0 {
			timeout = sandbox.AutoResumeTimeout
		}
		// Like a create: the answer carries the generation of the first
		// heartbeat that counts it (placement.Reservation.Confirm).
		w = &genWriter{ResponseWriter: w, gen: &n.gen}
		sb, err = AdoptAndResume(r.Context(), n.mgr, n.cfg.Store, n.Admit, id, req.From, timeout)
	} else {
		sb, err = Adopt(r.Context(), n.mgr, n.cfg.Store, id, req.From)
	}
	if err != nil {
		n.writeSandboxError(w, err)
		return
	}
	middleware.WriteJSON(w, http.StatusOK, cluster.SandboxMoved{SandboxID: id, Node: n.cfg.ID, State: sb.State})
	go n.BeatNow()
}

// uploadedWait bounds serveUploaded.
const uploadedWait = time.Minute

// serveUploaded answers 200 ({}) once the image of the paused sandbox is in
// the artifact store (its upload follows the pause's answer), waiting for
// it at most uploadedWait: the api tier asks before it moves the sandbox.
func (n *Node) serveUploaded(w http.ResponseWriter, r *http.Request, id string) {
	ctx, cancel := context.WithTimeout(r.Context(), uploadedWait)
	defer cancel()
	if err := AwaitUpload(ctx, n.mgr, id); err != nil {
		n.writeSandboxError(w, err)
		return
	}
	middleware.WriteJSON(w, http.StatusOK, struct{}{})
}

func (n *Node) serveEvacuate(w http.ResponseWriter, r *http.Request) {
	out := cluster.EvacuateResponse{Sandboxes: []cluster.SandboxMoved{}}
	for _, ev := range Evacuate(r.Context(), n.mgr) {
		m := cluster.SandboxMoved{SandboxID: ev.ID, Node: n.cfg.ID, State: ev.State, Was: ev.Was, LeftMs: ev.Left.Milliseconds()}
		if ev.Err != nil {
			m.Error = ev.Err.Error()
		}
		out.Sandboxes = append(out.Sandboxes, m)
	}
	middleware.WriteJSON(w, http.StatusOK, out)
	go n.BeatNow()
}

// drainedOnStopFile marks a node that drained itself when it was stopped:
// it goes live again by itself when it is back.
const drainedOnStopFile = "node-drained-on-stop"

// DrainOnStop runs when a node is stopped (SIGTERM, SIGINT) with
// --drain-on-stop and an artifact store: no more placement here, then
// every running sandbox paused into the store, marked evacuated, so that
// the api tier resumes each on another node at its next request (and hands
// the paused ones to other nodes). Bounded by drainOnStopTimeout.
func (n *Node) DrainOnStop(ctx context.Context) {
	if !n.cfg.Movable || n.cs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainOnStopTimeout)
	defer cancel()
	// The heartbeats stopped with the serve context: the node's row is
	// touched meanwhile, or the api tier would take it for lost after 15 s
	// and report the sandboxes not yet paused gone.
	go func() {
		t := time.NewTicker(cluster.HeartbeatInterval)
		defer t.Stop()
		for {
			if err := n.cs.Touch(ctx, n.cfg.ID); err != nil && ctx.Err() == nil {
				n.log.Debug("cluster node: touching the node's row while it drains", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	operatorDrained := n.lastState.Load() == cluster.StateDraining
	if err := n.cs.SetNodeState(ctx, n.cfg.ID, cluster.StateDraining); err != nil {
		n.log.Warn("cluster node: marking the node draining before it stops", "err", err)
	} else if !operatorDrained { // an operator's drain stays after the restart
		if err := os.WriteFile(filepath.Join(n.cfg.DataDir, drainedOnStopFile), nil, 0o600); err != nil {
			n.log.Warn("cluster node: recording the drain on stop", "err", err)
		}
	}
	start := time.Now()
	moved, failed := 0, 0
	for _, ev := range Evacuate(ctx, n.mgr) {
		if ev.Err != nil {
			failed++
			n.log.Warn("cluster node: a sandbox could not be paused into the artifact store; it stays here", "sandbox", ev.ID, "err", ev.Err)
			continue
		}
		moved++
	}
	n.log.Info("cluster node: drained on stop", "paused_to_store", moved, "failed", failed, "elapsed", time.Since(start).Round(time.Millisecond))
}

// dropMovedInterval is how often a node looks for paused sandboxes that
// other nodes adopted (DropMoved, runDropMoved).
const dropMovedInterval = 5 * time.Second

// drainOnStopTimeout bounds drainOnStop: the Helm chart's grace period
// (terminationGracePeriodSeconds, 300 s) leaves a minute after it for the
// shutdown itself.
const drainOnStopTimeout = 4 * time.Minute

// undrainAfterStop puts a node that drained itself when it was stopped
// back to live (a drain by an operator stays).
func (n *Node) undrainAfterStop(ctx context.Context, state string) {
	marker := filepath.Join(n.cfg.DataDir, drainedOnStopFile)
	if _, err := os.Stat(marker); err != nil {
		return
	}
	if state == cluster.StateDraining {
		if err := n.cs.SetNodeState(ctx, n.cfg.ID, cluster.StateLive); err != nil {
			n.log.Warn("cluster node: going live again after a drain on stop", "err", err)
			return
		}
		n.log.Info("cluster node: live again (it had drained itself when it stopped)")
	}
	_ = os.Remove(marker)
}
