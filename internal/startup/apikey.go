package startup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// APIKeySetting is the settings key holding the generated API key.
const APIKeySetting = "api_key"

// APIKey returns --api-key / $AIRLOCK_API_KEY, else the stored key,
// else generates "e2b_" + 40 hex digits and stores it in the settings and in
// <data>/api-key (0600). Every role resolves it so: the api tier's and a
// single host's key is the one their clients use; a cluster's nodes and api
// instances share it through the store.
func APIKey(ctx context.Context, flag, dataDir string, st store.Store) (string, error) {
	if k := firstNonEmpty(flag, os.Getenv("AIRLOCK_API_KEY")); k != "" {
		return k, nil
	}
	path := filepath.Join(dataDir, "api-key")
	key, err := st.GetSetting(ctx, APIKeySetting)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("reading API key setting: %w", err)
	}
	stored := key != ""
	if key == "" {
		if b, err := os.ReadFile(path); err == nil {
			key = strings.TrimSpace(string(b))
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("reading %s: %w", path, err)
		}
	}
	if key == "" {
		b := make([]byte, 20)
		if _, err := rand.Read(b); err != nil {
			return "", fmt.Errorf("generating API key: %w", err)
		}
		key = "e2b_" + hex.EncodeToString(b)
	}
	switch {
	case stored:
	case err == nil:
		// A stored but empty key: replace it.
		if err := st.PutSetting(ctx, APIKeySetting, key); err != nil {
			return "", fmt.Errorf("saving API key setting: %w", err)
		}
	default:
		// Of daemons starting at once on one database (a cluster's first
		// start), the first key stored is every one's.
		if key, err = st.InitSetting(ctx, APIKeySetting, key); err != nil {
			return "", fmt.Errorf("saving API key setting: %w", err)
		}
	}
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return "", fmt.Errorf("restricting %s: %w", path, err)
	}
	return key, nil
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}
