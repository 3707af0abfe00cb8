package guest

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// Operations a URL signature can authorise.
const (
	OpRead  = "read"
	OpWrite = "write"
)

// Signature verification failures. Their messages are sent to clients.
var (
	ErrMissingSignature = errors.New("missing signature query parameter")
	ErrInvalidSignature = errors.New("invalid signature")
	ErrExpiredSignature = errors.New("signature is already expired")
)

// Sign computes E2B's URL signature (spec §3.5):
// "v1_" + unpadded standard base64 of SHA-256("<path>:<operation>:<username>:<token>[:<expiration>]").
// An expiration <= 0 means the signature never expires (no suffix).
func Sign(path, operation, username, token string, expiration int64) string {
	exp := ""
	if expiration > 0 {
		exp = strconv.FormatInt(expiration, 10)
	}
	return sign(path, operation, username, token, exp)
}

func sign(path, operation, username, token, exp string) string {
	raw := path + ":" + operation + ":" + username + ":" + token
	if exp != "" {
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// VerifySignature checks the `signature` (and optional
// `signature_expiration`) query parameters of a /files request against
// token. The signed path and username are the raw `path` and `username`
// query values. The signature is compared in constant time before the
// expiry is checked, so ErrExpiredSignature implies the token matched.
func VerifySignature(q url.Values, operation, token string, now time.Time) error {
	sig := q.Get("signature")
	if sig == "" {
		return ErrMissingSignature
	}
	exp := ""
	var expUnix int64
	if v := q.Get("signature_expiration"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: bad signature_expiration", ErrInvalidSignature)
		}
		exp, expUnix = strconv.FormatInt(n, 10), n
	}
	want := sign(q.Get("path"), operation, q.Get("username"), token, exp)
	if subtle.ConstantTimeCompare([]byte(want), []byte(sig)) != 1 {
		return ErrInvalidSignature
	}
	if exp != "" && expUnix < now.Unix() {
		return ErrExpiredSignature
	}
	return nil
}
