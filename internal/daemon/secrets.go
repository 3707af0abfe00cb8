package daemon

import "github.com/airlock-sandbox/airlock/internal/secrets"

// openSecretsService returns the service behind /secrets and the egress
// proxy's placeholders, sealing with the same key as bucket volumes
// (openSecrets, buckets.go).
func (d *daemon) openSecretsService() (*secrets.Service, error) {
	box, err := d.openSecrets()
	if err != nil {
		return nil, err
	}
	return &secrets.Service{Store: d.st, Box: box}, nil
}
