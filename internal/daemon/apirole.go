package daemon

import (
	"context"
	"log/slog"

	"github.com/airlock-sandbox/airlock/internal/cluster/apirole"
	"github.com/airlock-sandbox/airlock/internal/webhooks"
)

// runAPI runs `airlock serve --role api`: the api tier's own composition
// (internal/cluster/apirole), which links no sandbox code, with the flags
// checkRole accepted.
//
// The api tier delivers the webhooks: it opens the stored signing secrets
// with --secrets-key-file, which must be the nodes' key (they seal them),
// and refuses the operator's --deny-out list as the nodes do.
func runAPI(ctx context.Context, cfg Config, r role, log *slog.Logger) error {
	denyOut, denyOutExcept, err := cfg.Egress.denyOut(log)
	if err != nil {
		return err
	}
	if cfg.SecretsKeyFile == "" {
		log.Warn("--secrets-key-file not given: the api tier generates its own key, and cannot open the webhook secrets the nodes sealed unless they all use the same file")
	}
	box, err := loadSecretsKey(cfg.SecretsKeyFile, cfg.DataDir)
	if err != nil {
		return err
	}
	return apirole.Run(ctx, apirole.Config{
		DataDir: cfg.DataDir, Store: cfg.Store, APIKey: cfg.APIKey, Domain: cfg.Domain, Listen: cfg.Listen,
		Artifacts: cfg.Artifacts, ArtifactGCInterval: cfg.ArtifactGCInterval,
		Secret: r.secret, TLS: r.tls, Stdout: cfg.Stdout,
		Events: apirole.Events{Retention: cfg.Events.Retention, WebhookAllowPrivate: cfg.Events.WebhookAllowPrivate,
			WebhookRetryInterval: cfg.Events.WebhookRetryInterval, DenyOut: denyOut, DenyOutExcept: denyOutExcept,
			Secrets: &webhooks.Secrets{Box: box}},
	}, log)
}
