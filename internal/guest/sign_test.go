package guest

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestSignKnownVector(t *testing.T) {
	// "v1_" + unpadded base64(sha256("/home/user/a.txt:read:user:tok:1700000000")).
	sum := sha256.Sum256([]byte("/home/user/a.txt:read:user:tok:1700000000"))
	want := "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
	if got := Sign("/home/user/a.txt", OpRead, "user", "tok", 1700000000); got != want {
		t.Fatalf("got %s want %s", got, want)
	}
	if strings.Contains(want, "=") {
		t.Fatal("padding in signature")
	}
	q := url.Values{"path": {"/home/user/a.txt"}, "username": {"user"}, "signature": {want}, "signature_expiration": {"1700000000"}}
	if err := VerifySignature(q, OpRead, "tok", time.Unix(1700000000, 0)); err != nil {
		t.Fatalf("at expiry second: %v", err)
	}
	if err := VerifySignature(q, OpRead, "tok", time.Unix(1700000001, 0)); !errors.Is(err, ErrExpiredSignature) {
		t.Fatalf("after expiry: %v", err)
	}
	q.Set("signature_expiration", "soon")
	if err := VerifySignature(q, OpRead, "tok", time.Unix(0, 0)); !errors.Is(err, ErrInvalidSignature) {
		t.Fatalf("bad expiration: %v", err)
	}
}
