// Package secretbox keeps small secrets (credentials) encrypted at rest in
// the store: AES-256-GCM with a random 96-bit nonce, under one key per
// daemon (--secrets-key-file / AIRLOCK_SECRETS_KEY_FILE, by default a 0600
// file generated under the data dir at first start). Callers pass
// associated data naming what a secret belongs to (e.g. a volume id), so a
// sealed value copied to another record does not open there.
//
// A sealed value is: version byte (1) || nonce (12 bytes) || ciphertext
// and tag.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// KeySize is the key's length in bytes (AES-256).
const KeySize = 32

const version = 1

// ErrOpen is returned by Open for a value that is not sealed with this
// key and associated data (tampered, truncated, another key).
var ErrOpen = errors.New("secretbox: cannot open sealed value (wrong key, wrong associated data or corrupted)")

// Box seals and opens values with one key. It is safe for concurrent use.
type Box struct {
	aead cipher.AEAD
}

// New returns a Box for a KeySize-byte key.
func New(key []byte) (*Box, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("secretbox: key is %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secretbox: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secretbox: %w", err)
	}
	return &Box{aead: aead}, nil
}

// Seal encrypts plaintext, binding it to ad.
func (b *Box) Seal(plaintext, ad []byte) ([]byte, error) {
	ns := b.aead.NonceSize()
	out := make([]byte, 1+ns, 1+ns+len(plaintext)+b.aead.Overhead())
	out[0] = version
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, fmt.Errorf("secretbox: nonce: %w", err)
	}
	return b.aead.Seal(out, out[1:1+ns], plaintext, ad), nil
}

// Open decrypts a value Seal returned for the same ad; ErrOpen otherwise.
func (b *Box) Open(sealed, ad []byte) ([]byte, error) {
	ns := b.aead.NonceSize()
	if len(sealed) < 1+ns+b.aead.Overhead() || sealed[0] != version {
		return nil, ErrOpen
	}
	pt, err := b.aead.Open(nil, sealed[1:1+ns], sealed[1+ns:], ad)
	if err != nil {
		return nil, ErrOpen
	}
	return pt, nil
}

// LoadOrCreate reads the key in path (KeySize bytes as 64 hex digits, a
// trailing newline allowed) or, when path does not exist and create is
// true, generates one and writes it there with mode 0600 (its directory
// made 0700 if missing). A key file readable by group or others is
// refused.
func LoadOrCreate(path string, create bool) (*Box, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && create {
		return generate(path)
	}
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secrets key %s: mode %v lets others read it; want 0600 (chmod 600 %s)", path, fi.Mode().Perm(), path)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil || len(key) != KeySize {
		return nil, fmt.Errorf("secrets key %s: want %d hex digits (e.g. from `openssl rand -hex %d`)", path, 2*KeySize, KeySize)
	}
	return New(key)
}

func generate(path string) (*Box, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	_, err = f.WriteString(hex.EncodeToString(key) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// Link, not rename: a key another process wrote first wins, and
		// both then read the same one.
		err = os.Link(tmp, path)
		if errors.Is(err, fs.ErrExist) {
			_ = os.Remove(tmp)
			return LoadOrCreate(path, false)
		}
	}
	_ = os.Remove(tmp)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return New(key)
}
