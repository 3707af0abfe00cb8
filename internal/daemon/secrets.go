package daemon

import (
	"fmt"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/secretbox"
	"github.com/airlock-sandbox/airlock/internal/secrets"
)

// openSecretsService opens the key sealing credentials in the store
// (--secrets-key-file, else <data-dir>/secrets.key, generated 0600 at first
// start; the file bucket volumes' credentials use too) and returns the
// service behind /secrets and the egress proxy's placeholders.
func (d *daemon) openSecretsService() (*secrets.Service, error) {
	path, create := d.cfg.SecretsKeyFile, false
	if path == "" {
		path, create = filepath.Join(d.dataDir, "secrets.key"), true
	}
	box, err := secretbox.LoadOrCreate(path, create)
	if err != nil {
		return nil, fmt.Errorf("--secrets-key-file: %w", err)
	}
	return &secrets.Service{Store: d.st, Box: box}, nil
}
