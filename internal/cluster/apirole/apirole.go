package apirole

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster/clustertls"
	"github.com/airlock-sandbox/airlock/internal/cluster/gateway"
	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/internal/helperenv"
	"github.com/airlock-sandbox/airlock/internal/imagebuild/buildspec"
	"github.com/airlock-sandbox/airlock/internal/middleware"
	"github.com/airlock-sandbox/airlock/internal/startup"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/postgres"
)

// storeOpenTimeout bounds opening the shared store at start (a node's
// daemon waits as long).
const storeOpenTimeout = 60 * time.Second

// Config is what the api tier runs with: the flags of `airlock serve` that
// apply to it, already checked by the caller (internal/daemon's checkRole:
// a PostgreSQL --store, the cluster secret and TLS material).
type Config struct {
	DataDir string // --data-dir: the api-key file, the artifact store's cache
	Store   string // --store: postgres://… (the cluster's shared database)
	APIKey  string // --api-key ("" = $AIRLOCK_API_KEY, else stored/generated)
	Domain  string // --domain: sandboxes at <port>-<id>.<domain>
	Listen  string // --listen

	// Artifacts is --artifacts ("" = none): with it every node can pull any
	// template, and the api tier collects the store every
	// ArtifactGCInterval (--artifact-gc-interval; 0 = never).
	Artifacts          string
	ArtifactGCInterval time.Duration

	// Secret is the cluster secret, TLS the api tier's certificate and the
	// cluster CA (--cluster-secret-file, --cluster-tls-dir).
	Secret string
	TLS    *clustertls.Material

	// Stdout receives the SDKs' environment line once serving (nil =
	// os.Stdout).
	Stdout io.Writer

	// Events are the --events-retention and --webhook-* flags: the api
	// tier delivers the webhooks of the events the nodes record, and
	// deletes old events (events.go).
	Events Events
}

// Run runs `airlock serve --role api`: the stateless api tier
// (internal/cluster/gateway) until ctx ends. It keeps nothing of its own:
// the nodes, routes and the API key are in the shared PostgreSQL store; the
// data directory holds only the api-key file (and, with --artifacts, the
// artifact store's cache directory, which the collection leaves empty).
// With --artifacts it also collects the artifact store (runArtifactGC).
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("resolving --data-dir: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("creating data directory: %w", err)
	}
	octx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
	st, err := postgres.Open(octx, cfg.Store, log.With("component", "store"))
	cancel()
	if err != nil {
		return fmt.Errorf("opening store (--store): %w", err)
	}
	defer func() {
		if err := st.Close(); err != nil {
			log.Warn("closing store", "err", err)
		}
	}()
	log.Info("store open", "store", st.String(), "role", "api")
	apiKey, err := startup.APIKey(ctx, cfg.APIKey, dataDir, st)
	if err != nil {
		return err
	}
	// The api tier's reaper deletes the rows of the running sandboxes of a
	// lost node: with the event hook each is recorded killed.
	team, err := events.TeamID(ctx, st)
	if err != nil {
		return err
	}
	st.SetEventHook((&events.Recorder{TeamID: team}).Hook)
	// With --artifacts the api tier collects the artifact store (one
	// instance at a time); the store is checked at start as on nodes.
	art, err := openArtifactGC(ctx, cfg, dataDir, log)
	if err != nil {
		return err
	}
	helperenv.DropSecrets() // every credential in the environment has been read
	g, err := gateway.New(gateway.Options{
		Store: st, Secret: cfg.Secret, TLS: cfg.TLS, APIKey: apiKey, Domain: cfg.Domain,
		Template: templateResources(st),
		// With an artifact store every node can pull any template.
		PullTemplates:   cfg.Artifacts != "",
		VerifySignature: guest.VerifySignature,
		Logger:          log.With("component", "gateway"),
	})
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	gcDone := runArtifactGC(ctx, art, st, cfg, log)
	// Before the store closes (deferred above): the collection stops first.
	defer func() {
		stop()
		<-gcDone
	}()
	evDone := runEvents(ctx, st, cfg.Events, log)
	defer func() {
		stop()
		<-evDone
	}()
	gdone := make(chan error, 1)
	go func() { gdone <- g.Run(ctx) }()

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	srv := &http.Server{
		Handler:           middleware.RequestID(g),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       620 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	stdout := cfg.Stdout
	if stdout == nil {
		stdout = os.Stdout
	}
	// E2B_VOLUME_API_URL: the SDKs send volume content requests there
	// (the api tier routes them to a node with the shared volume root).
	fmt.Fprintf(stdout, "export E2B_API_URL=%s E2B_SANDBOX_URL=%s E2B_VOLUME_API_URL=%s E2B_API_KEY=%s\n",
		startup.DisplayURL(ln.Addr()), startup.DisplayURL(ln.Addr()), startup.DisplayURL(ln.Addr()), apiKey)
	log.Info("airlock api tier ready", "addr", ln.Addr().String())
	var runErr error
	select {
	case <-ctx.Done():
		log.Info("signal received, shutting down")
	case err := <-serveErr:
		runErr = fmt.Errorf("serving: %w", err)
	case err := <-gdone:
		if err != nil && !errors.Is(err, context.Canceled) {
			runErr = fmt.Errorf("api tier: %w", err)
		}
	}
	stop()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("shutting down HTTP server", "err", err)
	}
	log.Info("api tier stopped")
	return runErr
}

// templateResources reads a template's CPUs and memory from the shared
// templates table, for placement (0, 0 when the template states none: the
// api tier then uses the nodes' defaults).
func templateResources(st store.Store) func(ctx context.Context, name string) (int, int, error) {
	return func(ctx context.Context, name string) (int, int, error) {
		t, err := st.GetTemplate(ctx, name)
		if err != nil {
			return 0, 0, err
		}
		c, ok := buildspec.Parse(t.Spec)
		if !ok {
			return 0, 0, nil
		}
		return c.CPUCount, c.MemoryMB, nil
	}
}
