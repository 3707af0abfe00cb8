package webhooks

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/secretbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// sealedPrefix marks a stored webhook secret sealed by Secrets (version 1):
// the rest is the secretbox value in standard base64. A stored value
// without it is a legacy clear secret (written before secrets were
// sealed); it still signs, and is sealed at the next write or start.
const sealedPrefix = "sealed:v1:"

// Sealed reports whether a stored webhook secret is sealed.
func Sealed(stored string) bool { return strings.HasPrefix(stored, sealedPrefix) }

// Secrets seals webhook signing secrets for the store and opens them for a
// delivery, with the daemon's --secrets-key-file (associated data: the
// webhook id, so a sealed value copied to another webhook does not open).
// Every daemon that writes or delivers webhooks (each node and api
// instance of a cluster) needs the same key.
type Secrets struct {
	Box *secretbox.Box
}

// Seal returns the value to store for webhook id's secret.
func (s *Secrets) Seal(id, secret string) (string, error) {
	if s == nil || s.Box == nil {
		return "", errors.New("webhooks: no secrets key to seal a webhook secret with")
	}
	b, err := s.Box.Seal([]byte(secret), []byte(id))
	if err != nil {
		return "", fmt.Errorf("sealing webhook %s secret: %w", id, err)
	}
	return sealedPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// Open returns webhook id's secret from its stored value: a sealed one
// opened, a legacy clear one as it is.
func (s *Secrets) Open(id, stored string) (string, error) {
	if !Sealed(stored) {
		return stored, nil
	}
	if s == nil || s.Box == nil {
		return "", fmt.Errorf("webhook %s: its secret is sealed and this daemon has no secrets key", id)
	}
	raw, err := base64.StdEncoding.DecodeString(stored[len(sealedPrefix):])
	if err != nil {
		return "", fmt.Errorf("webhook %s: its stored secret is corrupted: %w", id, err)
	}
	pt, err := s.Box.Open(raw, []byte(id))
	if err != nil {
		return "", fmt.Errorf("webhook %s: opening its signing secret (is --secrets-key-file the one it was sealed with, the same on every daemon of a cluster?): %w", id, err)
	}
	return string(pt), nil
}

// Reseal returns stored sealed: as it is when it already is, else the
// legacy clear value sealed.
func (s *Secrets) Reseal(id, stored string) (string, error) {
	if Sealed(stored) {
		return stored, nil
	}
	return s.Seal(id, stored)
}

// SealLegacy seals every webhook secret stored in the clear (by a daemon
// older than sealing) and returns how many it sealed. A webhook updated
// meanwhile is left alone: its update sealed it.
func (s *Secrets) SealLegacy(ctx context.Context, st store.EventStore) (int, error) {
	all, err := st.ListWebhooks(ctx)
	if err != nil {
		return 0, fmt.Errorf("sealing webhook secrets: %w", err)
	}
	n := 0
	for _, w := range all {
		if Sealed(w.Secret) {
			continue
		}
		sealed, err := s.Seal(w.ID, w.Secret)
		if err != nil {
			return n, err
		}
		ok, err := st.ReplaceWebhookSecret(ctx, w.ID, w.Secret, sealed)
		if err != nil {
			return n, fmt.Errorf("sealing webhook secrets: %w", err)
		}
		if ok {
			n++
		}
	}
	return n, nil
}
