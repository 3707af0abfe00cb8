// Package secrets keeps E2B's egress secrets (spec §11.4): named values a
// sandbox's network rules may place into the requests it sends
// (${e2b.secrets.<name>}) without the sandbox ever holding them. Values are
// sealed with secretbox under the daemon's key (associated data: the
// secret's id and version, so a sealed value moved to another record or
// version does not open) and stored in the store's secrets table; only the
// egress proxy's resolver opens them, in memory.
package secrets

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/secretbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// E2B's limits (spec §11.4).
const (
	MaxNameLen          = 128
	MaxValueBytes       = 64 << 10
	MaxMetadataEntries  = 32
	MaxMetadataKeyLen   = 128
	MaxMetadataValueLen = 1024
	MaxMetadataBytes    = 8192
	// IDPrefix starts every secret id; names may not start with it.
	IDPrefix = "sec_"
)

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// UserError is a refused request (a 4xx): Code is the HTTP status.
type UserError struct {
	Code int
	Msg  string
}

func (e *UserError) Error() string { return e.Msg }

func bad(format string, args ...any) error {
	return &UserError{Code: 400, Msg: fmt.Sprintf(format, args...)}
}

// ErrNotFound is returned for a secret that does not exist.
var ErrNotFound = errors.New("secret not found")

// Service creates, updates and resolves secrets.
type Service struct {
	Store store.SecretStore
	Box   *secretbox.Box
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}

// CanonicalName lower-cases name after checking E2B's naming rules.
func CanonicalName(name string) (string, error) {
	if name == "" || len(name) > MaxNameLen {
		return "", bad("Secret name must be between 1 and %d characters", MaxNameLen)
	}
	if !nameRE.MatchString(name) {
		return "", bad("Secret name may only contain letters, digits, '_' and '-'")
	}
	name = strings.ToLower(name)
	if strings.HasPrefix(name, IDPrefix) {
		return "", bad("Secret name may not start with %q (reserved for secret IDs)", IDPrefix)
	}
	return name, nil
}

// CheckValue applies E2B's value limits.
func CheckValue(v string) error {
	if v == "" {
		return bad("Secret value must not be empty")
	}
	if len(v) > MaxValueBytes {
		return bad("Secret value must be at most %d bytes", MaxValueBytes)
	}
	return nil
}

// CheckMetadata applies E2B's metadata limits.
func CheckMetadata(m map[string]string) error {
	if len(m) > MaxMetadataEntries {
		return bad("Secret metadata may have at most %d entries", MaxMetadataEntries)
	}
	total := 0
	for k, v := range m {
		if k == "" || len(k) > MaxMetadataKeyLen {
			return bad("Secret metadata keys must be between 1 and %d bytes", MaxMetadataKeyLen)
		}
		if len(v) > MaxMetadataValueLen {
			return bad("Secret metadata values must be at most %d bytes", MaxMetadataValueLen)
		}
		total += len(k) + len(v)
	}
	if total > MaxMetadataBytes {
		return bad("Secret metadata must be at most %d bytes in total", MaxMetadataBytes)
	}
	return nil
}

// ad is the associated data a secret's value is sealed for.
func ad(id string, version int64) []byte {
	return []byte(id + "\x00" + strconv.FormatInt(version, 10))
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return IDPrefix + hex.EncodeToString(b[:])
}

// Create stores a new secret (version 1).
func (s *Service) Create(ctx context.Context, name, value string, md map[string]string) (*store.Secret, error) {
	name, err := CanonicalName(name)
	if err != nil {
		return nil, err
	}
	if err := CheckValue(value); err != nil {
		return nil, err
	}
	if err := CheckMetadata(md); err != nil {
		return nil, err
	}
	now := s.now()
	rec := &store.Secret{ID: newID(), Name: name, Version: 1, Metadata: md, CreatedAt: now, UpdatedAt: now}
	if rec.Sealed, err = s.Box.Seal([]byte(value), ad(rec.ID, rec.Version)); err != nil {
		return nil, err
	}
	if err := s.Store.CreateSecret(ctx, rec); errors.Is(err, store.ErrNameTaken) {
		return nil, &UserError{Code: 409, Msg: fmt.Sprintf("Secret with name '%s' already exists", name)}
	} else if err != nil {
		return nil, err
	}
	return rec, nil
}

// Get finds a secret by id ("sec_…") or by name.
func (s *Service) Get(ctx context.Context, idOrName string) (*store.Secret, error) {
	var (
		rec *store.Secret
		err error
	)
	if strings.HasPrefix(idOrName, IDPrefix) {
		rec, err = s.Store.GetSecret(ctx, idOrName)
	} else {
		rec, err = s.Store.GetSecretByName(ctx, strings.ToLower(idOrName))
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("secret %q: %w", idOrName, ErrNotFound)
	}
	return rec, err
}

// List returns every secret, oldest first.
func (s *Service) List(ctx context.Context) ([]*store.Secret, error) {
	return s.Store.ListSecrets(ctx)
}

// Update stores value as the secret's next version; md nil keeps its
// metadata.
func (s *Service) Update(ctx context.Context, idOrName, value string, md map[string]string) (*store.Secret, error) {
	if err := CheckValue(value); err != nil {
		return nil, err
	}
	if md != nil {
		if err := CheckMetadata(md); err != nil {
			return nil, err
		}
	}
	for attempt := 0; ; attempt++ {
		rec, err := s.Get(ctx, idOrName)
		if err != nil {
			return nil, err
		}
		rec.Version++
		if md != nil {
			rec.Metadata = md
		}
		rec.UpdatedAt = s.now()
		if rec.Sealed, err = s.Box.Seal([]byte(value), ad(rec.ID, rec.Version)); err != nil {
			return nil, err
		}
		err = s.Store.UpdateSecret(ctx, rec)
		if errors.Is(err, store.ErrVersion) && attempt < 5 {
			continue // a concurrent update: the last writer wins
		}
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("secret %q: %w", idOrName, ErrNotFound)
		}
		if err != nil {
			return nil, err
		}
		return rec, nil
	}
}

// Delete removes a secret by id or name.
func (s *Service) Delete(ctx context.Context, idOrName string) error {
	rec, err := s.Get(ctx, idOrName)
	if err != nil {
		return err
	}
	if err := s.Store.DeleteSecret(ctx, rec.ID); errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("secret %q: %w", idOrName, ErrNotFound)
	} else if err != nil {
		return err
	}
	return nil
}

// Missing returns those of names that name no secret.
func (s *Service) Missing(ctx context.Context, names []string) ([]string, error) {
	var missing []string
	for _, n := range names {
		if _, err := s.Store.GetSecretByName(ctx, strings.ToLower(n)); errors.Is(err, store.ErrNotFound) {
			missing = append(missing, n)
		} else if err != nil {
			return nil, err
		}
	}
	return missing, nil
}

// Resolve opens the current value of the secret named name. Only the
// egress proxy calls it; the value must never reach a log or an error.
func (s *Service) Resolve(ctx context.Context, name string) ([]byte, error) {
	rec, err := s.Store.GetSecretByName(ctx, strings.ToLower(name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("secret %q: %w", name, ErrNotFound)
	} else if err != nil {
		return nil, err
	}
	v, err := s.Box.Open(rec.Sealed, ad(rec.ID, rec.Version))
	if err != nil {
		return nil, fmt.Errorf("secret %q version %d: %w", name, rec.Version, err)
	}
	return v, nil
}
