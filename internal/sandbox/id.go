package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// newID returns "i" followed by 20 random characters from [a-z0-9] (a
// valid id for runtime.ValidID).
func newID() (string, error) {
	const n = 20
	out := make([]byte, 0, n+1)
	out = append(out, 'i')
	// Rejection sampling keeps the distribution uniform (252 = 7*36).
	buf := make([]byte, 32)
	for len(out) < n+1 {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("reading random bytes: %w", err)
		}
		for _, b := range buf {
			if b >= 252 || len(out) == n+1 {
				continue
			}
			out = append(out, idAlphabet[int(b)%len(idAlphabet)])
		}
	}
	return string(out), nil
}

// newToken returns 32 random bytes, hex encoded.
func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading random bytes: %w", err)
	}
	return hex.EncodeToString(b), nil
}
