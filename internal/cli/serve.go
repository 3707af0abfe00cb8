package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/console"
	"github.com/airlock-sandbox/airlock/internal/daemonlock"
	"github.com/airlock-sandbox/airlock/internal/envd/files"
	"github.com/airlock-sandbox/airlock/internal/guestconn"
	"github.com/airlock-sandbox/airlock/internal/imagebuild"
	"github.com/airlock-sandbox/airlock/internal/jsonlog"
	"github.com/airlock-sandbox/airlock/internal/metrics"
	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/proxy"
	"github.com/airlock-sandbox/airlock/internal/runtime/gvisor"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/sqlite"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// DefaultListen is the daemon's default listen address.
const DefaultListen = "127.0.0.1:49982"

// apiKeySetting is the settings key holding the generated API key.
const apiKeySetting = "api_key"

func init() {
	register(func(root *cobra.Command) { root.AddCommand(newServeCmd()) })
}

// serveOptions are the flags of `airlock serve`.
type serveOptions struct {
	listen     string
	dataDir    string
	envdPath   string
	runtime    string
	domain     string
	subnet     string
	netPrefix  string
	logLevel   string
	logFormat  string
	killOnExit bool
	templates  []string
	// bootSnapshots serves creates of the default templates from a
	// snapshot of a booted (and warmed) sandbox.
	bootSnapshots bool
	// warmPool is the number of restored, unclaimed sandboxes per template.
	warmPool map[string]int
	// metricsInterval is the sampling period of sandbox metrics.
	metricsInterval time.Duration
	limits          limitFlags
	egress          egressFlags
	microvmKernel   string
	gvisor          gvisorFlags
}

func newServeCmd() *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the Airlock daemon (E2B-compatible API and sandbox proxy)",
		Long: `Run the Airlock daemon: one listener serves the E2B-compatible REST API and
all sandbox traffic. On first start it builds the default templates ("base" and
"code-interpreter-v1"; GET /health answers 503 until that is done), then prints the environment variables the E2B
SDKs need.

On SIGTERM/SIGINT the daemon stops serving but leaves running sandboxes alone;
the next start re-attaches them (or cleans them up if they died or expired).
Use --kill-on-exit to kill every sandbox on shutdown instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", DefaultListen, "address to serve the API and sandbox traffic on")
	f.StringVar(&o.dataDir, "data-dir", firstNonEmpty(os.Getenv("AIRLOCK_DATA_DIR"), DefaultDataDir), "data directory (database, templates, sandboxes)")
	f.StringVar(&o.envdPath, "envd-path", "", "path of the airlock-envd agent binary (default: next to this executable, else $PATH)")
	f.StringVar(&o.runtime, "runtime", "auto", "isolation runtime: auto (a microVM on hardware KVM, else gvisor), microvm (emulated without KVM) or gvisor")
	f.StringVar(&o.microvmKernel, "microvm-kernel", "", "guest kernel for microVMs (default: newest built by scripts/build-kernel.sh)")
	addGVisorFlags(f, &o.gvisor)
	f.StringVar(&o.domain, "domain", "", "sandbox domain returned to SDKs; sandboxes are then reached as <port>-<id>.<domain> (optional)")
	f.StringVar(&o.subnet, "subnet", network.DefaultSubnet, "IPv4 pool for sandbox addresses")
	addLimitFlags(f, &o.limits)
	addEgressFlags(f, &o.egress)
	f.DurationVar(&o.metricsInterval, "metrics-interval", metrics.DefaultInterval, "how often each sandbox's CPU, memory and disk use is sampled")
	f.StringVar(&o.netPrefix, "net-prefix", network.DefaultNamePrefix, "name prefix of network namespaces, host veths and the nftables table (two daemons on one host need different prefixes and subnets, neither prefix the start of the other)")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.BoolVar(&o.killOnExit, "kill-on-exit", false, "kill all sandboxes when the daemon shuts down")
	f.BoolVar(&o.bootSnapshots, "boot-snapshots", true, "boot each default template once, snapshot it (with warm interpreter contexts) and serve creates by restoring that snapshot (runtimes that can checkpoint; falls back to a cold boot)")
	f.StringToIntVar(&o.warmPool, "warm-pool", nil, "keep N restored, unclaimed sandboxes per template for the fastest creates, e.g. code-interpreter-v1=2 (needs --boot-snapshots); default: code-interpreter-v1 gets an automatic pool sized from the last minute's creates (1 to 4) while the host has memory to spare; code-interpreter-v1=0 turns it off")
	f.StringSliceVar(&o.templates, "templates", []string{"base", "code-interpreter-v1"}, "built-in templates to build (once, cached) before the daemon reports ready")
	return cmd
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("invalid --log-level %q: %w", level, err)
	}
	hopts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, hopts)), nil
	}
	return nil, fmt.Errorf("invalid --log-format %q: want text or json", format)
}

func runServe(cmd *cobra.Command, o *serveOptions) (err error) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	log, err := newLogger(o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	subnet, err := netip.ParsePrefix(o.subnet)
	if err != nil || !subnet.Addr().Is4() || subnet.Bits() > 30 {
		return fmt.Errorf("invalid --subnet %q: want an IPv4 prefix of at most /30", o.subnet)
	}
	envdPath, err := findEnvd(o.envdPath)
	if err != nil {
		return err
	}
	dataDir, err := filepath.Abs(o.dataDir)
	if err != nil {
		return fmt.Errorf("resolving --data-dir: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dataDir, "sandboxes"), 0o700); err != nil {
		return fmt.Errorf("creating data directory: %w", err)
	}
	// One daemon per data dir and per network prefix: a second one would
	// rebuild the first's nftables table and remove its veths as stale.
	holder := fmt.Sprintf("pid %d, started %s: airlock serve --listen %s --data-dir %s --net-prefix %s --subnet %s --runtime %s",
		os.Getpid(), time.Now().UTC().Format(time.RFC3339), o.listen, dataDir, o.netPrefix, o.subnet, o.runtime)
	dataLock, err := daemonlock.Acquire(filepath.Join(dataDir, "daemon.lock"), "the data directory "+dataDir, holder)
	if err != nil {
		return err
	}
	defer dataLock.Close()
	netLock, err := daemonlock.AcquireNetPrefix(daemonlock.DefaultRunDir, o.netPrefix, holder)
	if err != nil {
		return err
	}
	defer netLock.Close()
	// Sandboxes run (and restores map) an immutable, content-addressed copy
	// of the agent, so a new build of airlock-envd never replaces the code
	// under paused sandboxes and snapshots (internal/agentbin).
	agentsDir := filepath.Join(dataDir, "agents")
	if envdPath, err = agentbin.Install(agentsDir, envdPath); err != nil {
		return fmt.Errorf("installing the agent binary: %w", err)
	}

	st, err := sqlite.Open(filepath.Join(dataDir, "airlock.db"))
	if err != nil {
		return fmt.Errorf("opening store: %w", err)
	}
	defer closeLogged(log, "store", st.Close)

	apiKey, err := resolveAPIKey(ctx, flagString(cmd, "api-key"), dataDir, st)
	if err != nil {
		return err
	}

	auditGroup, err := o.egress.group(o.netPrefix)
	if err != nil {
		return err
	}
	// Sandbox events and egress audit logs on disk (internal/jsonlog).
	logs, err := jsonlog.Open(filepath.Join(dataDir, "logs"), jsonlog.Options{}, log.With("component", "logs"))
	if err != nil {
		return err
	}
	defer closeLogged(log, "sandbox logs", logs.Close)
	netMgr, err := network.NewManager(ctx, network.Config{Subnet: subnet, NamePrefix: o.netPrefix,
		DNSUpstreams: o.egress.upstreams, AuditGroup: auditGroup, AuditLogs: logs}, log)
	if err != nil {
		return fmt.Errorf("starting network manager: %w", err)
	}
	rt, rtChoice, err := newRuntime(ctx, o.runtime, o.microvmKernel, o.gvisor, dataDir, envdPath, log)
	if err != nil {
		return err
	}
	if c, ok := rt.(io.Closer); ok { // gvisor: runsc's mounts in its root dir
		defer c.Close()
	}
	tm := template.NewManager(dataDir, st, log)

	conns := guestconn.New(5 * time.Second) // agent and proxy connections, reset before a pause
	conns.OnAbort = func(ip netip.Addr, n int) { log.Debug("guest connections reset", "guest", ip, "count", n) }
	dm := newDaemonMetrics(ctx, o.metricsInterval, log.With("component", "metrics"))
	mgrCfg := sandbox.Config{
		Conns:       conns,
		Observer:    dm,
		Runtime:     rt,
		Network:     netMgr,
		Templates:   sandboxTemplates{tm},
		Store:       st,
		Logger:      log.With("component", "sandbox"),
		DataDir:     dataDir,
		Logs:        logs,
		AgentPath:   envdPath,
		MaxSlots:    1 << (32 - subnet.Bits() - 2),
		NetNSPrefix: o.netPrefix + "-",
	}
	o.limits.apply(&mgrCfg)
	mgrCfg.BootSnapshots = o.bootSnapshots
	for name, n := range o.warmPool {
		if n < 0 || n > 64 {
			return fmt.Errorf("--warm-pool %s=%d: want 0..64", name, n)
		}
	}
	mgrCfg.WarmPool = o.warmPool
	if !cmd.Flags().Changed("warm-pool") && slices.Contains(o.templates, "code-interpreter-v1") {
		mgrCfg.AutoWarmPool = []string{"code-interpreter-v1"}
		mgrCfg.AutoWarmPoolMax = sandbox.DefaultAutoWarmPoolMax
	}
	mgrCfg.PoolMemoryReserve = poolMemoryReserve()
	mgr, err := sandbox.New(mgrCfg)
	if err != nil {
		return err
	}
	rep, err := mgr.Restore(ctx)
	if err != nil {
		log.Error("restoring sandboxes (continuing)", "err", err)
	}
	log.Info("restore done", "reattached", len(rep.Reattached), "removed", len(rep.Removed), "leaked", len(rep.Leaked))
	if srep, serr := mgr.InitSnapshots(ctx); serr != nil {
		log.Error("checking snapshots (continuing)", "err", serr)
	} else {
		log.Info("snapshots checked", "verified", len(srep.Verified), "invalid", len(srep.Invalid),
			"removed", len(srep.Removed), "collected", len(srep.Collected))
		if err == nil { // the restore saw every sandbox: unreferenced agents can go
			gcAgents(ctx, mgr, agentsDir, log)
		}
	}
	// Sandboxes that stop on their own (agent killed, memory limit) are
	// reported gone, with the reason; orphaned runtime sandboxes are destroyed.
	go mgr.Reap(ctx, sandbox.DefaultWatchInterval)
	dm.attach(mgr)
	dm.overview = metrics.NewOverview(dataDir, 5*time.Second, log.With("component", "overview"))
	go dm.overview.Run(ctx)

	// Build layers: gVisor's writable layer, or a microVM's exported disk.
	var layers imagebuild.LayerSource
	if rtChoice.Runtime == "gvisor" {
		layers = imagebuild.UpperDir(gvisor.UpperDir)
	} else if vm, ok := rt.(imagebuild.DiskExporter); ok {
		layers = imagebuild.NewDiskSource(vm, log.With("component", "imagebuild"))
	}
	builder := imagebuild.New(mgr, tm, layers, log)
	apiHandler := api.New(mgr, apiTemplates{tm: tm, mgr: mgr, builder: builder}, api.Options{APIKey: apiKey, Domain: o.domain, Logger: log.With("component", "api"),
		Metrics: dm.col, Prometheus: dm.prom.Handler(), Runtime: rtChoice.Runtime, RuntimeReason: rtChoice.Reason,
		Platform: rtChoice.Platform, PlatformReason: rtChoice.PlatformReason, TemplateBuilds: newSDKBuildStore(st, dataDir)})
	var apiHosts []string
	if o.domain != "" {
		apiHosts = append(apiHosts, "api."+o.domain)
	}
	sandboxTransport := proxy.DefaultTransport()
	dm.closeIdle = sandboxTransport.CloseIdleConnections
	consoleHandler := console.New(console.Options{APIKey: apiKey, Next: apiHandler, Processes: mgr, Overview: dm.overview,
		Counts: func() map[string]int { return sandboxCounts(mgr) }, Logger: log.With("component", "console")})
	handler := proxy.New(proxy.FromManager(mgr), consoleHandler, proxy.Options{
		APIHosts:        apiHosts,
		VerifySignature: files.VerifySignature,
		Transport:       conns.Wrap(sandboxTransport),
		Logger:          log.With("component", "proxy"),
		UploadGuard:     mgr.CheckHostDisk,
	})

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", o.listen, err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       620 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("listening (not ready until the default templates exist)", "addr", ln.Addr().String(), "templates", o.templates)

	// Ensure the default templates while /health answers 503.
	ready := make(chan error, 1)
	go func() {
		for _, name := range o.templates {
			start := time.Now()
			if _, err := tm.Ensure(ctx, name, template.TerminalProgress(os.Stderr)); err != nil {
				ready <- fmt.Errorf("template %s: %w", name, err)
				return
			}
			log.Info("template ready", "name", name, "elapsed", time.Since(start).Round(time.Millisecond))
		}
		gcTemplates(ctx, tm, mgr, log) // old builds; before any create is accepted
		ready <- nil
	}()

	shutdown := func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		mgr.SetReady(false)
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("shutting down HTTP server", "err", err)
		}
		mgr.DrainWarmPool(sctx)
		var errs []error
		if o.killOnExit {
			if err := mgr.KillAll(sctx); err != nil {
				errs = append(errs, fmt.Errorf("killing sandboxes: %w", err))
			}
		}
		if err := mgr.Close(sctx); err != nil {
			errs = append(errs, err)
		}
		left := len(mgr.List())
		if err := netMgr.Close(sctx, o.killOnExit && left == 0); err != nil {
			errs = append(errs, fmt.Errorf("closing network manager: %w", err))
		}
		log.Info("daemon stopped", "sandboxes_left_running", left)
		return errors.Join(errs...)
	}

	for {
		select {
		case err := <-ready:
			if err != nil {
				_ = shutdown()
				return fmt.Errorf("preparing the default templates: %w", err)
			}
			mgr.SetReady(true)
			fmt.Fprintf(cmd.OutOrStdout(), "export E2B_API_URL=%s E2B_SANDBOX_URL=%s E2B_API_KEY=%s\n",
				displayURL(ln.Addr()), displayURL(ln.Addr()), apiKey)
			log.Info("airlock ready", "addr", ln.Addr().String())
			ready = nil
			if o.bootSnapshots && mgr.BootSnapshotsSupported() {
				go func() {
					mgr.PrepareBootSnapshots(ctx, o.templates)
					mgr.RunWarmPool(ctx)
				}()
			} else if len(o.warmPool) > 0 {
				log.Warn("--warm-pool needs boot snapshots (--boot-snapshots and a runtime that can checkpoint); no pool")
			}
		case err := <-serveErr:
			_ = shutdown()
			return fmt.Errorf("serving: %w", err)
		case <-ctx.Done():
			log.Info("signal received, shutting down")
			return shutdown()
		}
	}
}

// poolMemoryReserve is the host memory a warm pool never fills into: 1 GiB
// plus a tenth of the host's memory (sandboxes in use come first).
func poolMemoryReserve() uint64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 2 << 30
	}
	return 1<<30 + uint64(si.Totalram)*uint64(si.Unit)/10
}

// displayURL is the URL clients use for a listener address.
func displayURL(addr net.Addr) string {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	ip := ap.Addr().Unmap()
	if ip.IsUnspecified() {
		ip = netip.MustParseAddr("127.0.0.1")
	}
	return "http://" + netip.AddrPortFrom(ip, ap.Port()).String()
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

// resolveAPIKey returns --api-key / $AIRLOCK_API_KEY, else the stored key,
// else generates "e2b_" + 40 hex digits and stores it in the settings and in
// <data>/api-key (0600).
func resolveAPIKey(ctx context.Context, flag, dataDir string, st store.Store) (string, error) {
	if k := firstNonEmpty(flag, os.Getenv("AIRLOCK_API_KEY")); k != "" {
		return k, nil
	}
	path := filepath.Join(dataDir, "api-key")
	key, err := st.GetSetting(ctx, apiKeySetting)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("reading API key setting: %w", err)
	}
	if key == "" {
		if b, err := os.ReadFile(path); err == nil {
			key = strings.TrimSpace(string(b))
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("reading %s: %w", path, err)
		}
	}
	if key == "" {
		b := make([]byte, 20)
		if _, err := rand.Read(b); err != nil {
			return "", fmt.Errorf("generating API key: %w", err)
		}
		key = "e2b_" + hex.EncodeToString(b)
	}
	if err := st.PutSetting(ctx, apiKeySetting, key); err != nil {
		return "", fmt.Errorf("saving API key setting: %w", err)
	}
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return "", fmt.Errorf("restricting %s: %w", path, err)
	}
	return key, nil
}

func closeLogged(log *slog.Logger, what string, f func() error) {
	if err := f(); err != nil {
		log.Warn("closing "+what, "err", err)
	}
}

// sandboxTemplates adapts the template manager to sandbox.Templates.
type sandboxTemplates struct{ tm *template.Manager }

func (s sandboxTemplates) Resolve(ctx context.Context, name string) (*sandbox.Template, error) {
	t, err := s.tm.Get(ctx, name)
	if errors.Is(err, template.ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrTemplateNotFound, err)
	}
	if err != nil {
		return nil, err
	}
	return &sandbox.Template{Name: t.Name, Hash: t.Hash, RootFS: t.RootFS, TemplateConfig: templateConfig(t)}, nil
}

// apiTemplates adapts the template manager to api.Templates.
type apiTemplates struct {
	tm      *template.Manager
	mgr     *sandbox.Manager
	builder *imagebuild.Builder
}

func toTemplateInfo(t *template.Template) api.TemplateInfo {
	cpu, mem, cfg := apiConfig(t)
	return api.TemplateInfo{Name: t.Name, Hash: t.Hash, SizeBytes: t.SizeBytes, CreatedAt: t.CreatedAt, CPUCount: cpu, MemoryMB: mem, Config: cfg}
}

func (a apiTemplates) List(ctx context.Context) ([]api.TemplateInfo, error) {
	ts, err := a.tm.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.TemplateInfo, 0, len(ts))
	for _, t := range ts {
		out = append(out, toTemplateInfo(t))
	}
	return out, nil
}

func (a apiTemplates) Build(ctx context.Context, name string, force bool, progress func(api.Progress)) (*api.TemplateInfo, error) {
	t, err := a.tm.Build(ctx, name, template.BuildOptions{Force: force}, func(p template.Progress) {
		progress(api.Progress{Phase: p.Phase, Message: p.Message, Done: p.Done, Total: p.Total})
	})
	if err != nil {
		return nil, err
	}
	gcTemplatesLater(a.tm, a.mgr)
	info := toTemplateInfo(t)
	return &info, nil
}

var _ api.TemplateAdmin = apiTemplates{}

// gcAgents removes installed agent builds nothing refers to any more.
func gcAgents(ctx context.Context, mgr *sandbox.Manager, dir string, log *slog.Logger) {
	keep, err := mgr.AgentsInUse(ctx)
	if err != nil {
		log.Warn("agent gc skipped", "err", err)
		return
	}
	n, err := agentbin.GC(dir, keep)
	if err != nil {
		log.Warn("agent gc", "err", err)
	}
	if n > 0 {
		log.Info("agent gc: removed unreferenced agent builds", "count", n, "kept", len(keep))
	}
}
