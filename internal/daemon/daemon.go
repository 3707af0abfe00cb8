package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/activity"
	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/artifacts"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/cluster/node"
	"github.com/airlock-sandbox/airlock/internal/console"
	"github.com/airlock-sandbox/airlock/internal/daemonlock"
	"github.com/airlock-sandbox/airlock/internal/egressproxy"
	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/internal/guestconn"
	"github.com/airlock-sandbox/airlock/internal/helperenv"
	"github.com/airlock-sandbox/airlock/internal/imagebuild"
	"github.com/airlock-sandbox/airlock/internal/jsonlog"
	"github.com/airlock-sandbox/airlock/internal/metrics"
	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/proxy"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/secretbox"
	"github.com/airlock-sandbox/airlock/internal/secrets"
	"github.com/airlock-sandbox/airlock/internal/startup"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/volume"
	"github.com/airlock-sandbox/airlock/internal/webhooks"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb/filesystempbconnect"
)

// DefaultListen is the daemon's default listen address.
const DefaultListen = "127.0.0.1:49982"

// Config is everything `airlock serve` is told (its flags). Error messages
// name the flags, as the operator wrote them.
type Config struct {
	Listen   string // --listen
	DataDir  string // --data-dir
	Store    string // --store ("" = SQLite in the data dir, else a postgres:// URL)
	EnvdPath string // --envd-path ("" = next to this executable, else $PATH)
	// APIKey is --api-key ("" = $AIRLOCK_API_KEY, else the stored or a
	// generated key).
	APIKey        string
	Runtime       string // --runtime: auto, microvm or gvisor
	MicrovmKernel string // --microvm-kernel
	GVisor        GVisor
	Domain        string // --domain
	Subnet        string // --subnet
	NetPrefix     string // --net-prefix
	LogLevel      string // --log-level
	LogFormat     string // --log-format: text or json
	KillOnExit    bool   // --kill-on-exit
	// SecretsKeyFile is --secrets-key-file: the key sealing credentials in
	// the store (internal/secretbox; "" = <data-dir>/secrets.key, made at
	// first start).
	SecretsKeyFile string
	// Artifacts is --artifacts: "" (none), s3://bucket/prefix or a
	// directory; opened and checked at start (startup.OpenArtifacts).
	Artifacts string
	// ArtifactGCInterval is --artifact-gc-interval: how often the api tier
	// collects the artifact store (internal/artifactgc); 0 never.
	ArtifactGCInterval time.Duration
	// Templates are the built-in templates built before the daemon is ready.
	Templates []string
	// BootSnapshots serves creates of the default templates from a
	// snapshot of a booted (and warmed) sandbox.
	BootSnapshots bool
	// WarmPool is the number of restored, unclaimed sandboxes per template;
	// WarmPoolSet reports that --warm-pool was given (else
	// code-interpreter-v1 gets an automatic pool).
	WarmPool    map[string]int
	WarmPoolSet bool
	// MetricsInterval is the sampling period of sandbox metrics.
	MetricsInterval time.Duration
	Limits          Limits
	Egress          Egress
	// Builds limits what a template build's FROM reads (builds.go).
	Builds Builds
	// Stdout receives the `export E2B_API_URL=...` line once ready.
	Stdout io.Writer

	// Role is --role: cluster.RoleAll ("" too), RoleAPI or RoleNode.
	Role string
	// NodeID is --node-id (a node's name in the cluster; default: the
	// host name).
	NodeID string
	// AdvertiseAddr is --advertise-addr: where the api tier reaches this
	// node (default: --listen, when it names a host).
	AdvertiseAddr string
	// ClusterSecretFile is --cluster-secret-file ("" = $AIRLOCK_CLUSTER_SECRET).
	ClusterSecretFile string
	// ClusterTLSDir is --cluster-tls-dir: ca.crt and node.crt/node.key (a
	// node) or api.crt/api.key (the api tier).
	ClusterTLSDir string
	// NodeLabels is --node-labels (besides the detected "kvm").
	NodeLabels []string
	// NodeCPUs and NodeMemoryMB are --node-cpus and --node-memory: the
	// capacity a node states (0 = host CPUs × 4, host memory less the warm
	// pool's reserve).
	NodeCPUs, NodeMemoryMB int
	// DrainOnStop: a --role node with --artifacts pauses its running
	// sandboxes into the artifact store when it is stopped (node.go,
	// drainOnStop).
	DrainOnStop bool
	// Volumes are the --volume-* flags (volumes.go).
	Volumes Volumes
	// Events are the --events-* and --webhook-* flags (events.go).
	Events Events
}

// Run starts the daemon and serves until ctx ends (a clean shutdown) or
// serving fails.
func Run(ctx context.Context, cfg Config) error {
	out := newLogWriter(os.Stderr)
	defer out.Close()
	log, err := newLogger(cfg.LogLevel, cfg.LogFormat, out)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	role, err := checkRole(&cfg)
	if err != nil {
		return err
	}
	if role.api {
		return runAPI(ctx, cfg, role, log)
	}
	subnet, err := netip.ParsePrefix(cfg.Subnet)
	if err != nil || !subnet.Addr().Is4() || subnet.Bits() > 30 {
		return fmt.Errorf("invalid --subnet %q: want an IPv4 prefix of at most /30", cfg.Subnet)
	}
	denyOut, denyOutExcept, err := cfg.Egress.denyOut(log)
	if err != nil {
		return err
	}
	pull, err := cfg.Builds.pullConfig(subnet, denyOut, denyOutExcept)
	if err != nil {
		return err
	}
	upstreamRoots, err := cfg.Egress.upstreamRoots() // egressproxy.go
	if err != nil {
		return err
	}
	envdPath, err := findEnvd(cfg.EnvdPath)
	if err != nil {
		return err
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("resolving --data-dir: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dataDir, "sandboxes"), 0o700); err != nil {
		return fmt.Errorf("creating data directory: %w", err)
	}
	// A lost store lease (another daemon took the database) cancels ctx
	// with the reason: the daemon shuts down instead of fighting for it.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	d := &daemon{cfg: cfg, log: log, dataDir: dataDir, envdPath: envdPath, subnet: subnet, stop: cancel, pending: newPendingTemplates(cfg.Templates),
		denyOut: denyOut, denyOutExcept: denyOutExcept, pull: pull, role: role, upstreamRoots: upstreamRoots}
	defer d.close()
	err = d.open(ctx)
	if err == nil {
		err = d.serve(ctx)
	}
	if cause := context.Cause(ctx); errors.Is(cause, store.ErrLeaseLost) {
		return errors.Join(cause, err)
	}
	return err
}

// daemon holds what Run built, in the order it was built.
type daemon struct {
	cfg      Config
	log      *slog.Logger
	dataDir  string
	envdPath string
	subnet   netip.Prefix
	// denyOut and denyOutExcept are the parsed --deny-out and
	// --deny-out-except.
	denyOut, denyOutExcept []netip.Prefix
	// pull is what a template build's FROM may read (--registry-allow,
	// --image-dir, --max-image-mb, and the deny list).
	pull imagebuild.PullConfig
	// nameservers are the sandboxes' resolv.conf servers, read once: the
	// same list is given to the sandbox manager and, as the resolvers DNS
	// may reach past the deny list, to the network manager.
	nameservers []string
	// closers run in reverse order when Run returns.
	closers []func()
	// stop cancels Run's context with a cause (a lost store lease).
	stop context.CancelCauseFunc

	// artifacts is the --artifacts store (nil without it): opened and
	// checked at start; templates and snapshots do not use it yet.
	artifacts *artifacts.Store

	apiKey string
	st     store.Full
	netMgr *network.Manager
	// activity is the sandboxes' live activity feed (nil: off).
	activity *activity.Hub
	// approvals serves the egress approval hook (approval.go); nil when off.
	approvals *api.Approvals
	rt        runtime.Runtime
	rtInfo    runtimeInfo
	tm        *template.Manager
	mgr       *sandbox.Manager
	metrics   *daemonMetrics
	handler   http.Handler
	// files are the uploaded file sets of SDK template builds.
	files *api.FileSets
	// volumes serves E2B's volume API (nil: it answers 501; volumes.go).
	volumes *api.Volumes
	// buckets mounts bucket volumes (nil: none on this node; buckets.go).
	buckets *volume.Buckets
	// events and deliverer: lifecycle events and webhooks (events.go).
	events    *api.Events
	deliverer *webhooks.Deliverer
	// secretBox seals credentials in the store (buckets.go: openSecrets),
	// opened once.
	secretBox *secretbox.Box
	// secrets keeps E2B's egress secrets (/secrets; secrets.go).
	secrets *secrets.Service
	// upstreamRoots are the CAs the egress proxy trusts upstream (the
	// system's and --egress-proxy-upstream-ca's), read by Run.
	upstreamRoots *x509.CertPool
	// egressCA is the egress proxy's CA (nil: no proxy; egressproxy.go).
	egressCA *egressproxy.CA
	// egressProxyErr is why the egress proxy did not start (nil: it did,
	// or was not asked to); network rules are then refused with 503.
	egressProxyErr error

	// infraBlocked are the store's and the artifact store's addresses,
	// which no sandbox reaches (blocked.go).
	infraBlocked []netip.Addr

	// role is the cluster role (--role) and, for a node, its identity.
	role role
	// node is the node's side of the cluster (nil unless --role node:
	// internal/cluster/node); blocked is its blocked set's refresh state
	// (blocked.go).
	node    *node.Node
	blocked blockedState
	// pending are the default templates still being prepared at start
	// (pending.go); tplFirst and tplAll are prepareTemplates' outcome.
	pending  *pendingTemplates
	tplFirst chan struct{}
	tplAll   chan error
}

func (d *daemon) defer_(f func()) { d.closers = append(d.closers, f) }

func (d *daemon) close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// open builds every component, up to the HTTP handler.
func (d *daemon) open(ctx context.Context) error {
	if err := d.lock(); err != nil {
		return err
	}
	var err error
	if d.artifacts, err = startup.OpenArtifacts(ctx, d.cfg.Artifacts, d.dataDir, os.Getenv, d.log); err != nil {
		return err
	}
	// Sandboxes run (and restores map) an immutable, content-addressed copy
	// of the agent, so a new build of airlock-envd never replaces the code
	// under paused sandboxes and snapshots (internal/agentbin).
	if d.envdPath, err = agentbin.Install(d.agentsDir(), d.envdPath); err != nil {
		return fmt.Errorf("installing the agent binary: %w", err)
	}
	st, where, err := openStore(ctx, d.cfg.Store, d.role.nodeID, d.dataDir, d.log)
	if err != nil {
		return err
	}
	d.defer_(func() { closeLogged(d.log, "store", st.Close) })
	d.st = st
	d.log.Info("store open", "store", where)
	d.watchStoreLease(ctx)
	if d.role.node {
		d.node = d.newNode(st)
		go d.node.KeepAlive(ctx)
	}
	if d.apiKey, err = startup.APIKey(ctx, d.cfg.APIKey, d.dataDir, st); err != nil {
		return err
	}
	if err := d.openEvents(ctx, st); err != nil {
		return err
	}
	d.infraBlocked = d.infraAddrs(ctx, os.Getenv(artifacts.EnvEndpoint))
	// Every credential in the environment has been read (artifact store,
	// store, cluster secret, API key): no process started from here on
	// inherits them (helpers get their own minimal env anyway).
	helperenv.DropSecrets()
	auditGroup, err := d.cfg.Egress.group(d.cfg.NetPrefix)
	if err != nil {
		return err
	}
	// Sandbox events and egress audit logs on disk (internal/jsonlog).
	logs, err := jsonlog.Open(filepath.Join(d.dataDir, "logs"), jsonlog.Options{}, d.log.With("component", "logs"))
	if err != nil {
		return err
	}
	d.defer_(func() { closeLogged(d.log, "sandbox logs", logs.Close) })
	var auditObs audit.Observer
	if n := d.cfg.Egress.ActivityMaxEntries; n > 0 {
		// The activity feed (internal/activity), in files of its own.
		alogs, err := jsonlog.Open(filepath.Join(d.dataDir, "activity"), jsonlog.Options{MaxLines: n, MaxBytes: int64(n) << 9},
			d.log.With("component", "activity"))
		if err != nil {
			return err
		}
		d.defer_(func() { closeLogged(d.log, "activity logs", alogs.Close) })
		d.activity = activity.New(alogs, activity.Options{MaxEntries: n, MaxAge: d.cfg.Egress.ActivityMaxAge, Log: d.log.With("component", "activity")})
		auditObs = d.activity
		// File entries from the agent's watch, only while someone listens.
		fsClient := func(id string) (filesystempbconnect.FilesystemClient, error) {
			live, err := d.mgr.Lookup(id)
			if err != nil {
				return nil, err
			}
			return live.FilesystemClient()
		}
		d.activity.SetOnListen(func(ctx context.Context, id string) {
			d.activity.WatchFiles(ctx, id, fsClient, activity.DefaultFilePaths)
		})
		// Process entries from gVisor's runtime monitoring.
		tr, err := activity.StartTracer(d.activity, filepath.Join(d.dataDir, "trace"))
		if err != nil {
			d.log.Warn("activity feed without process entries", "err", err)
		} else {
			d.defer_(func() { closeLogged(d.log, "activity tracer", tr.Close) })
			tr.Known = func(id string) bool { _, err := d.mgr.Lookup(id); return err == nil }
			d.cfg.GVisor.podInit = tr.ConfigPath()
		}
	}
	d.nameservers = sandbox.HostNameservers("/etc/resolv.conf")
	proxyPort := d.startEgressProxy()    // egressproxy.go
	socksPort := d.startSocksRelay()     // socksrelay.go
	approvals, err := d.setupApprovals() // approval.go
	if err != nil {
		return err
	}
	d.netMgr, err = network.NewManager(ctx, network.Config{Subnet: d.subnet, NamePrefix: d.cfg.NetPrefix, InterceptPort: proxyPort, SocksPort: socksPort,
		DNSUpstreams: d.cfg.Egress.DNSUpstreams, AuditGroup: auditGroup, AuditLogs: logs, AuditObserver: auditObs,
		DenyOut: d.denyOut, DenyOutExcept: d.denyOutExcept, Resolvers: resolverAddrs(d.nameservers),
		BlockedAddrs: d.infraBlocked, ApprovalConfig: approvals}, d.log)
	if err != nil {
		return fmt.Errorf("starting network manager: %w", err)
	}
	d.log.Info("operator deny list", "deny_out", prefixList(d.denyOut), "deny_out_except", prefixList(d.denyOutExcept))
	if d.node != nil && d.node.Shared() {
		// The other nodes' addresses, before a sandbox is restored (the
		// heartbeat loop keeps them current once the node is ready).
		d.refreshBlocked(ctx)
	}
	if d.role.node {
		// Sandboxes move between nodes under their ids; nodes sharing a
		// host (the one-machine cluster) must not share their cgroups.
		d.cfg.GVisor.cgroupParent = "airlock-node-" + d.role.nodeID
	}
	var tmStore store.Store = st
	if d.node != nil { // the templates table is the cluster's
		tmStore = node.TemplateRecords{Store: st, Changed: d.node.BeatNow}
	}
	d.tm = template.NewManager(d.dataDir, tmStore, d.log)
	d.tm.SetShared(d.role.node)
	// Templates are pushed to and pulled from --artifacts (nil: the data dir only).
	d.tm.SetArtifacts(d.artifacts)
	if d.node != nil { // a pulled template is this node's at once
		d.tm.OnPull(d.node.BeatNow)
	}
	// The default templates build from here on, beside the runtime's start
	// (on a fresh host that may wait for runsc's build: gvisor.go).
	d.tplFirst, d.tplAll = d.prepareTemplates(ctx)
	d.rt, d.rtInfo, err = newRuntime(ctx, d.cfg.Runtime, d.cfg.MicrovmKernel, d.cfg.GVisor, d.dataDir, d.envdPath, d.log)
	if err != nil {
		return err
	}
	if c, ok := d.rt.(io.Closer); ok { // gvisor: runsc's mounts in its root dir
		d.defer_(func() { c.Close() })
	}
	conns := guestconn.New(5 * time.Second) // agent and proxy connections, reset before a pause
	conns.OnAbort = func(ip netip.Addr, n int) { d.log.Debug("guest connections reset", "guest", ip, "count", n) }
	d.metrics = newDaemonMetrics(ctx, d.cfg.MetricsInterval, d.log.With("component", "metrics"))
	if w, ok := d.rt.(interface{ WakeCounts() (int64, int64) }); ok { // gvisor: datagram or runsc kill
		d.metrics.prom.AgentWakes(w.WakeCounts)
	}
	d.metrics.prom.EgressFlowEndsDropped(d.netMgr.FlowEndsDropped)
	if err := d.newManager(st, logs, conns); err != nil {
		return err
	}
	d.reattach(ctx)
	// Sandboxes that stop on their own (agent killed, memory limit) are
	// reported gone, with the reason; orphaned runtime sandboxes are destroyed.
	go d.mgr.Reap(ctx, sandbox.DefaultWatchInterval)
	d.followProcesses(ctx) // procfeed.go: process entries of microVMs
	d.runEvents(ctx)
	d.metrics.attach(d.mgr)
	d.metrics.overview = metrics.NewOverview(d.dataDir, 5*time.Second, d.log.With("component", "overview"))
	go d.metrics.overview.Run(ctx)
	d.handler = d.newHandler(conns)
	return nil
}

// lock takes the daemon's locks: one daemon per data dir and per network
// prefix (a second one would rebuild the first's nftables table and remove
// its veths as stale).
func (d *daemon) lock() error {
	holder := fmt.Sprintf("pid %d, started %s: airlock serve --listen %s --data-dir %s --net-prefix %s --subnet %s --runtime %s",
		os.Getpid(), time.Now().UTC().Format(time.RFC3339), d.cfg.Listen, d.dataDir, d.cfg.NetPrefix, d.cfg.Subnet, d.cfg.Runtime)
	dataLock, err := daemonlock.Acquire(filepath.Join(d.dataDir, "daemon.lock"), "the data directory "+d.dataDir, holder)
	if err != nil {
		return err
	}
	d.defer_(func() { dataLock.Close() })
	netLock, err := daemonlock.AcquireNetPrefix(daemonlock.DefaultRunDir, d.cfg.NetPrefix, holder)
	if err != nil {
		return err
	}
	d.defer_(func() { netLock.Close() })
	return nil
}

// watchStoreLease stops the daemon when another daemon took the store's
// lease (it was cut off from the database for longer than the lease's
// staleness bound): the store refuses every operation from then on, and
// two daemons acting on one database would remove each other's sandboxes.
// The sandboxes stay as they are (with --kill-on-exit they are killed).
func (d *daemon) watchStoreLease(ctx context.Context) {
	lostc, lost := storeLeaseLost(d.st)
	if lostc == nil {
		return
	}
	go func() {
		select {
		case <-lostc:
			err := lost()
			d.log.Error("store lease lost to another daemon; shutting down", "err", err)
			d.stop(err)
		case <-ctx.Done():
		}
	}()
}

func (d *daemon) agentsDir() string { return filepath.Join(d.dataDir, "agents") }

// newManager builds the sandbox manager.
func (d *daemon) newManager(st store.Full, logs *jsonlog.Store, conns *guestconn.Tracker) error {
	mgrCfg := sandbox.Config{
		Nameservers: d.nameservers,
		Conns:       conns,
		Observer:    d.metrics,
		Runtime:     d.rt,
		Network:     d.netMgr,
		Templates:   waitingTemplates{next: sandboxTemplates{d.tm}, pending: d.pending, log: d.log.With("component", "sandbox")},
		Store:       st,
		Logger:      d.log.With("component", "sandbox"),
		DataDir:     d.dataDir,
		Logs:        logs,
		AgentPath:   d.envdPath,
		MaxSlots:    1 << (32 - d.subnet.Bits() - 2),
		NetNSPrefix: d.cfg.NetPrefix + "-",
	}
	if d.egressCA != nil { // egressproxy.go
		mgrCfg.CABundle = d.egressCA.CertPEM
	}
	if d.egressProxyErr != nil {
		mgrCfg.EgressProxyDown = d.egressProxyErr.Error()
	}
	d.cfg.Limits.apply(&mgrCfg)
	vols, err := d.openVolumes()
	if err != nil {
		return err
	}
	vols, buckets, err := d.openBuckets(vols) // buckets.go
	if err != nil {
		return err
	}
	mgrCfg.Volumes = vols
	if d.volumes, err = d.volumeAPI(vols); err != nil {
		return err
	}
	if d.volumes != nil {
		d.volumes.Buckets = buckets
	}
	if d.secrets, err = d.openSecretsService(); err != nil { // secrets.go
		return err
	}
	mgrCfg.BootSnapshots = d.cfg.BootSnapshots
	for name, n := range d.cfg.WarmPool {
		if n < 0 || n > 64 {
			return fmt.Errorf("--warm-pool %s=%d: want 0..64", name, n)
		}
	}
	mgrCfg.WarmPool = d.cfg.WarmPool
	if !d.cfg.WarmPoolSet && slices.Contains(d.cfg.Templates, "code-interpreter-v1") {
		mgrCfg.AutoWarmPool = []string{"code-interpreter-v1"}
		mgrCfg.AutoWarmPoolMax = sandbox.DefaultAutoWarmPoolMax
	}
	mgrCfg.PoolMemoryReserve = poolMemoryReserve()
	if d.node != nil {
		mgrCfg.Admit = d.node.Admit
		mgrCfg.NodeID = d.role.nodeID
		if d.artifacts != nil { // paused sandboxes and snapshots move between nodes
			mgrCfg.Node = node.Hooks(artifacts.Images{St: d.artifacts}, st)
		}
	}
	mgr, err := sandbox.New(mgrCfg)
	if err != nil {
		return err
	}
	d.mgr = mgr
	if d.node != nil {
		d.node.Attach(mgr, d.tm, d.rtInfo.Runtime, d.rtInfo.Accel == "kvm")
	}
	return nil
}

// reattach re-attaches the sandboxes of the previous run, checks the
// snapshots and removes agent builds nothing refers to.
func (d *daemon) reattach(ctx context.Context) {
	rep, err := d.mgr.Reattach(ctx)
	if err != nil {
		d.log.Error("re-attaching sandboxes (continuing)", "err", err)
	}
	d.log.Info("reattach done", "reattached", len(rep.Reattached), "removed", len(rep.Removed), "leaked", len(rep.Leaked))
	d.activity.GC(func(id string) bool { _, err := d.mgr.Lookup(id); return err == nil })
	srep, serr := d.mgr.InitSnapshots(ctx)
	if serr != nil {
		d.log.Error("checking snapshots (continuing)", "err", serr)
		return
	}
	d.log.Info("snapshots checked", "verified", len(srep.Verified), "invalid", len(srep.Invalid),
		"removed", len(srep.Removed), "collected", len(srep.Collected))
	if err == nil { // the restore saw every sandbox: unreferenced agents can go
		gcAgents(ctx, d.mgr, d.agentsDir(), d.log)
	}
}

// newHandler builds the HTTP stack: the proxy (sandbox traffic), then the
// console and the REST API behind middleware.RequestID (sandbox traffic
// keeps the sandbox's own headers).
func (d *daemon) newHandler(conns *guestconn.Tracker) http.Handler {
	builder := imagebuild.New(d.mgr, d.tm, d.rtInfo.layers, d.log, imagebuild.WithPull(d.pull))
	sdkStore := newSDKBuildStore(d.st, d.dataDir)
	d.files = sdkStore.files
	apiHandler := api.New(d.mgr, apiTemplates{tm: d.tm, mgr: d.mgr, builder: builder}, api.Options{APIKey: d.apiKey, Domain: d.cfg.Domain,
		Logger: d.log.With("component", "api"), Metrics: d.metrics.col, Prometheus: d.metrics.prom.Handler(),
		Runtime: d.rtInfo.Runtime, RuntimeReason: d.rtInfo.Reason, Platform: d.rtInfo.Platform, PlatformReason: d.rtInfo.PlatformReason,
		TemplateBuilds: sdkStore, Trusted: d.trusted(), Building: d.pending.Building, Volumes: d.volumes,
		NoVolumes: d.noVolumes(), Events: d.events, Activity: d.activity, Secrets: d.secrets,
		EgressProxy: &api.EgressProxyOptions{Box: d.secretBox, AllowPrivate: d.cfg.Egress.ProxyAllowPrivate},
		Approvals:   d.approvals})
	var apiHosts []string
	if d.cfg.Domain != "" {
		apiHosts = append(apiHosts, "api."+d.cfg.Domain)
	}
	sandboxTransport := proxy.DefaultTransport()
	d.metrics.closeIdle = sandboxTransport.CloseIdleConnections
	consoleHandler := console.New(console.Options{APIKey: d.apiKey, Next: apiHandler, Processes: d.mgr, Overview: d.metrics.overview,
		Counts: func() map[string]int { return sandboxCounts(d.mgr) }, Logger: d.log.With("component", "console"), Trusted: d.trusted()})
	var apiSide http.Handler = middleware.RequestID(consoleHandler)
	if d.timing() {
		apiSide = middleware.Timing(d.log.With("component", "api"), apiSide)
	}
	h := proxy.New(proxy.FromManager(d.mgr), apiSide, proxy.Options{
		APIHosts:        apiHosts,
		VerifySignature: guest.VerifySignature,
		Transport:       conns.Wrap(sandboxTransport),
		Logger:          d.log.With("component", "proxy"),
		UploadGuard:     d.mgr.CheckHostDisk,
		APIKey:          d.apiKey, // never passed on to sandbox code
	})
	if d.node != nil {
		return d.node.Guard(h)
	}
	return h
}

// timing reports whether API requests log their timing (debug level:
// middleware.Timing).
func (d *daemon) timing() bool { return d.log.Enabled(context.Background(), slog.LevelDebug) }

// serve listens, prepares the default templates while /health answers 503,
// then serves until ctx ends or serving fails, and shuts down.
func (d *daemon) serve(ctx context.Context) error {
	ln, err := net.Listen("tcp", d.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", d.cfg.Listen, err)
	}
	if d.timing() { // under the TLS: net/http must see the *tls.Conn
		ln = middleware.TimingListener(ln)
	}
	if d.node != nil {
		// Mutual TLS with the api tier (clustertls); the guard refuses what
		// comes without its certificate.
		ln = tls.NewListener(ln, d.role.tls.ServerConfig())
	}
	srv := &http.Server{
		Handler:           d.handler,
		ConnContext:       middleware.TimingConnContext,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       620 * time.Second,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelDebug),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	d.log.Info("listening (not ready until a default template exists)", "addr", ln.Addr().String(), "templates", d.cfg.Templates)
	first, all := d.tplFirst, d.tplAll
	for {
		select {
		case <-first:
			// A single host serves once one default template is ready
			// (creates of the others wait for them); a node joins the
			// cluster with all of them.
			first = nil
			if d.node == nil {
				// Every default template already on disk (a restart):
				// the rest are ready within moments, so old builds are
				// collected before the first create is accepted, as
				// before templates were served one by one.
				select {
				case err := <-all:
					all = nil
					if err != nil {
						_ = d.shutdown(ctx, srv)
						return fmt.Errorf("preparing the default templates: %w", err)
					}
					d.templatesReady(ctx)
					d.ready(ctx, ln.Addr())
					continue
				case <-time.After(2 * time.Second):
				}
				d.ready(ctx, ln.Addr())
			}
		case err := <-all:
			all = nil
			if err != nil {
				_ = d.shutdown(ctx, srv)
				return fmt.Errorf("preparing the default templates: %w", err)
			}
			if first != nil || d.node != nil { // not served yet
				first = nil
				d.ready(ctx, ln.Addr())
			}
			if d.node != nil {
				go d.node.Run(ctx)
			}
			d.templatesReady(ctx)
		case err := <-serveErr:
			_ = d.shutdown(ctx, srv)
			return fmt.Errorf("serving: %w", err)
		case <-ctx.Done():
			if cause := context.Cause(ctx); errors.Is(cause, store.ErrLeaseLost) {
				d.log.Error("shutting down: the store's lease was lost", "err", cause)
			} else {
				d.log.Info("signal received, shutting down")
				if d.node != nil && d.cfg.DrainOnStop {
					d.node.DrainOnStop(ctx)
				}
			}
			return d.shutdown(ctx, srv)
		}
	}
}

// prepareTemplates ensures the default templates in the background, all at
// once (a fresh host builds them side by side rather than one after the
// other). first is closed when one of them is ready (or when there are
// none); all gets the outcome once every build ended, the first error if
// any. d.pending tracks the builds still running.
func (d *daemon) prepareTemplates(ctx context.Context) (first chan struct{}, all chan error) {
	first, all = make(chan struct{}), make(chan error, 1)
	var once sync.Once
	markFirst := func() { once.Do(func() { close(first) }) }
	if len(d.cfg.Templates) == 0 {
		markFirst()
	}
	errs := make([]error, len(d.cfg.Templates))
	var wg sync.WaitGroup
	for i, name := range d.cfg.Templates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			// Each build's progress lines carry its name: two run at once.
			out := template.TerminalProgress(prefixWriter{w: os.Stderr, prefix: name + ": "})
			_, err := d.tm.Ensure(ctx, name, d.pending.progress(name, out))
			if err != nil {
				err = fmt.Errorf("template %s: %w", name, err)
				errs[i] = err
			}
			d.pending.finish(name, err)
			if err == nil {
				d.log.Info("template ready", "name", name, "elapsed", time.Since(start).Round(time.Millisecond),
					"still_building", d.pending.Building())
				markFirst()
			}
		}()
	}
	go func() {
		wg.Wait()
		all <- errors.Join(errs...)
	}()
	return first, all
}

// templatesReady runs once every default template is ready: old builds are
// collected (no build runs now), and templates recorded before --artifacts
// was given are pushed.
func (d *daemon) templatesReady(ctx context.Context) {
	gcTemplates(ctx, d.tm, d.mgr, d.log)
	go d.tm.PushMissing(ctx)
	d.startBootSnapshots(ctx)
}

// ready marks the daemon ready and prints the SDKs' environment.
func (d *daemon) ready(ctx context.Context, addr net.Addr) {
	d.mgr.SetReady(true)
	stdout := d.cfg.Stdout
	if stdout == nil {
		stdout = os.Stdout
	}
	if d.role.node {
		// Clients never talk to a node: they use the api tier's URL.
		fmt.Fprintf(stdout, "airlock node %s ready at %s (clients use the api tier)\n", d.role.nodeID, d.role.advertise)
	} else {
		// E2B_VOLUME_API_URL: the SDKs send volume content requests
		// there (else to https://api.<E2B_DOMAIN>).
		fmt.Fprintf(stdout, "export E2B_API_URL=%s E2B_SANDBOX_URL=%s E2B_VOLUME_API_URL=%s E2B_API_KEY=%s\n",
			startup.DisplayURL(addr), startup.DisplayURL(addr), startup.DisplayURL(addr), d.apiKey)
	}
	d.log.Info("airlock ready", "addr", addr.String(), "role", d.role.name)
	go gcTemplateFilesLoop(ctx, d.files, d.log.With("component", "template"))
	if d.buckets != nil { // bucket volumes deleted elsewhere lose their mount here
		go d.buckets.RunSweeper(ctx, 30*time.Second)
	}
}

// startBootSnapshots starts the boot snapshots and the warm pool, once every
// default template is ready.
func (d *daemon) startBootSnapshots(ctx context.Context) {
	if d.cfg.BootSnapshots && d.mgr.BootSnapshotsSupported() {
		go func() {
			d.mgr.PrepareBootSnapshots(ctx, d.cfg.Templates)
			d.mgr.RunWarmPool(ctx)
		}()
	} else if len(d.cfg.WarmPool) > 0 {
		d.log.Warn("--warm-pool needs boot snapshots (--boot-snapshots and a runtime that can checkpoint); no pool")
	}
}

// shutdown stops serving and, with --kill-on-exit, every sandbox.
func (d *daemon) shutdown(ctx context.Context, srv *http.Server) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	d.mgr.SetReady(false)
	if err := srv.Shutdown(sctx); err != nil {
		d.log.Warn("shutting down HTTP server", "err", err)
	}
	d.mgr.DrainWarmPool(sctx)
	var errs []error
	if d.cfg.KillOnExit {
		if err := d.mgr.KillAll(sctx); err != nil {
			errs = append(errs, fmt.Errorf("killing sandboxes: %w", err))
		}
	}
	if err := d.mgr.Close(sctx); err != nil {
		errs = append(errs, err)
	}
	left := len(d.mgr.List())
	if d.buckets != nil && d.cfg.KillOnExit && left == 0 {
		if err := d.buckets.Close(); err != nil { // else they outlive us with the sandboxes
			errs = append(errs, fmt.Errorf("unmounting bucket volumes: %w", err))
		}
	}
	if err := d.netMgr.Close(sctx, d.cfg.KillOnExit && left == 0); err != nil {
		errs = append(errs, fmt.Errorf("closing network manager: %w", err))
	}
	d.log.Info("daemon stopped", "sandboxes_left_running", left)
	return errors.Join(errs...)
}

// newLogger returns the daemon's logger, writing to out.
func newLogger(level, format string, out io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("invalid --log-level %q: %w", level, err)
	}
	hopts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(out, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(out, hopts)), nil
	}
	return nil, fmt.Errorf("invalid --log-format %q: want text or json", format)
}

// poolMemoryReserve is the host memory a warm pool never fills into: 1 GiB
// plus a tenth of the host's memory (sandboxes in use come first).
func poolMemoryReserve() uint64 {
	total := hostMemory()
	if total == 0 {
		return 2 << 30
	}
	return 1<<30 + total/10
}

// hostMemory is the host's total memory in bytes (0 when unknown).
func hostMemory() uint64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}

// findEnvd locates the agent binary.
func findEnvd(flag string) (string, error) {
	if flag != "" {
		p, err := filepath.Abs(flag)
		if err != nil {
			return "", fmt.Errorf("resolving --envd-path: %w", err)
		}
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("--envd-path: %w", err)
		}
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "airlock-envd")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("airlock-envd")
	if err != nil {
		return "", errors.New("airlock-envd not found next to this executable or in $PATH; pass --envd-path")
	}
	return filepath.Abs(p)
}

func closeLogged(log *slog.Logger, what string, f func() error) {
	if err := f(); err != nil {
		log.Warn("closing "+what, "err", err)
	}
}

// resolverAddrs are the addresses of the sandboxes' nameservers: DNS to
// them passes the operator deny list, so a host resolver at a private
// address (a cloud VPC resolver, a home router, the cluster DNS) keeps
// working.
func resolverAddrs(nameservers []string) []netip.Addr {
	var out []netip.Addr
	for _, s := range nameservers {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// prefixList renders ps for a log line ("none" when empty).
func prefixList(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return "none"
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
