package apirole

import (
	"context"
	"errors"
	"log/slog"
	"os"

	"github.com/airlock-sandbox/airlock/internal/artifactgc"
	"github.com/airlock-sandbox/airlock/internal/artifacts"
	"github.com/airlock-sandbox/airlock/internal/startup"
	"github.com/airlock-sandbox/airlock/internal/store/postgres"
)

// artifactGCFirstDelay is how long after start the api tier's first
// collection of the artifact store runs (tests shorten it).
var artifactGCFirstDelay = artifactgc.DefaultFirstDelay

// openArtifactGC opens and checks --artifacts for the api tier's
// collection (internal/artifactgc), or returns nil when there is nothing to
// collect: no --artifacts, or --artifact-gc-interval 0 (the api tier uses
// the store for nothing else, so then it is not even opened).
func openArtifactGC(ctx context.Context, cfg Config, dataDir string, log *slog.Logger) (*artifacts.Store, error) {
	if cfg.ArtifactGCInterval < 0 {
		return nil, errors.New("--artifact-gc-interval must not be negative (0 turns the collection off)")
	}
	if cfg.Artifacts == "" || cfg.ArtifactGCInterval == 0 {
		return nil, nil
	}
	return startup.OpenArtifacts(ctx, cfg.Artifacts, dataDir, os.Getenv, log)
}

// runArtifactGC collects art in the background until ctx ends, every
// interval, under the database's lock so that one api instance of the
// cluster collects at a time; each pass's report is logged. The returned
// channel is closed once it stopped (a pass in progress is cancelled). A
// nil art does nothing.
func runArtifactGC(ctx context.Context, art *artifacts.Store, db *postgres.DB, cfg Config, log *slog.Logger) <-chan struct{} {
	done := make(chan struct{})
	if art == nil {
		close(done)
		return done
	}
	opts := artifactgc.Options{
		Store: art, Refs: db, Lock: db.TryArtifactGCLock,
		Interval: cfg.ArtifactGCInterval, FirstDelay: artifactGCFirstDelay,
		Log: log.With("component", "artifact-gc"),
	}
	log.Info("artifact store collection scheduled", "store", art.String(), "interval", cfg.ArtifactGCInterval,
		"first_pass_in", artifactGCFirstDelay, "grace", artifactgc.DefaultGrace)
	go func() {
		defer close(done)
		if err := artifactgc.Run(ctx, opts); err != nil {
			log.Error("artifact store collection not started", "err", err)
		}
	}()
	return done
}
