package store

import (
	"context"
	"errors"
	"time"
)

// ErrVersion is returned by SecretStore.UpdateSecret when the secret's
// stored version is not the one the update follows (a concurrent update).
var ErrVersion = errors.New("store: version changed")

// Secret is the record of one E2B egress secret (spec §11.4). Its value is
// only ever held sealed (internal/secretbox, associated data = ID and
// Version), never in the clear.
type Secret struct {
	ID                   string // "sec_…"
	Name                 string // unique, lower case
	Version              int64  // 1 at create, +1 per update
	Sealed               []byte // the value, sealed for (ID, Version)
	Metadata             map[string]string
	CreatedAt, UpdatedAt time.Time
}

// SecretStore is implemented by stores that keep secrets. Secrets belong to
// no node: in a cluster every node reads them all.
type SecretStore interface {
	// CreateSecret inserts s; ErrNameTaken when its name (or id) is used.
	CreateSecret(ctx context.Context, s *Secret) error
	// GetSecret returns the secret with id; ErrNotFound when none.
	GetSecret(ctx context.Context, id string) (*Secret, error)
	// GetSecretByName returns the secret named name; ErrNotFound when none.
	GetSecretByName(ctx context.Context, name string) (*Secret, error)
	// ListSecrets returns every secret, oldest first (CreatedAt, ID).
	ListSecrets(ctx context.Context) ([]*Secret, error)
	// UpdateSecret replaces the value, metadata and UpdatedAt of the
	// secret s.ID whose stored version is s.Version-1, storing s.Version;
	// ErrNotFound when none, ErrVersion when its version moved on.
	UpdateSecret(ctx context.Context, s *Secret) error
	// DeleteSecret removes the secret with id; ErrNotFound when none.
	DeleteSecret(ctx context.Context, id string) error
}
