package startup

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
)

// artifactCheckTimeout bounds the start-up check of --artifacts.
const artifactCheckTimeout = 30 * time.Second

// OpenArtifacts opens and checks the artifact store that --artifacts names
// (internal/artifacts): "" is none (the single-host default: templates and
// snapshots stay in the data dir), else s3://bucket/prefix (endpoint and
// credentials from getenv) or a directory. The store's cache is
// <data-dir>/artifacts-cache. A store that cannot be reached or written
// stops the start with an error naming the flag.
//
// The template manager pushes and pulls templates through it
// (template.Manager.SetArtifacts); on cluster nodes paused sandboxes and
// named snapshots too; the api tier opens it to collect it
// (internal/cluster/apirole).
func OpenArtifacts(ctx context.Context, spec, dataDir string, getenv func(string) string, log *slog.Logger) (*artifacts.Store, error) {
	if spec == "" {
		return nil, nil
	}
	sp, err := artifacts.ParseSpec(spec, getenv)
	if err != nil {
		return nil, fmt.Errorf("--artifacts: %w", err)
	}
	b, err := sp.Backend()
	if err != nil {
		return nil, fmt.Errorf("--artifacts: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, artifactCheckTimeout)
	defer cancel()
	start := time.Now()
	if err := b.Check(cctx); err != nil {
		return nil, fmt.Errorf("--artifacts %s: %w", b, err)
	}
	st, err := artifacts.NewStore(b, filepath.Join(dataDir, "artifacts-cache"), log.With("component", "artifacts"))
	if err != nil {
		return nil, fmt.Errorf("--artifacts: %w", err)
	}
	log.Info("artifact store ready", "store", b.String(), "cache", st.CacheDir(), "check", time.Since(start).Round(time.Millisecond))
	return st, nil
}
