package daemon

import (
	"context"
	"log/slog"

	"github.com/airlock-sandbox/airlock/internal/cluster/apirole"
)

// runAPI runs `airlock serve --role api`: the api tier's own composition
// (internal/cluster/apirole), which links no sandbox code, with the flags
// checkRole accepted.
func runAPI(ctx context.Context, cfg Config, r role, log *slog.Logger) error {
	return apirole.Run(ctx, apirole.Config{
		DataDir: cfg.DataDir, Store: cfg.Store, APIKey: cfg.APIKey, Domain: cfg.Domain, Listen: cfg.Listen,
		Artifacts: cfg.Artifacts, ArtifactGCInterval: cfg.ArtifactGCInterval,
		Secret: r.secret, TLS: r.tls, Stdout: cfg.Stdout,
		Events: apirole.Events{Retention: cfg.Events.Retention, WebhookAllowPrivate: cfg.Events.WebhookAllowPrivate,
			WebhookRetryInterval: cfg.Events.WebhookRetryInterval},
	}, log)
}
