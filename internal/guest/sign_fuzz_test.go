package guest

import (
	"errors"
	"net/url"
	"strconv"
	"testing"
	"time"
)

// FuzzVerifySignature feeds arbitrary query strings to the verifier: it must
// never panic, must accept exactly the signatures Sign produces for the parsed
// values, and must reject any other signature.
func FuzzVerifySignature(f *testing.F) {
	f.Add("path=%2Fhome%2Fuser%2Fa.txt&username=user", "tok", int64(0), "read")
	f.Add("path=a+b%3Ac&signature_expiration=5", "t:k", int64(99), "write")
	f.Add("path=%00&path=x&username=&signature=v1_", "", int64(-1), "read")
	f.Add("%zz=1;;&&signature_expiration=9999999999999999999999", "x", int64(1), "write")
	f.Fuzz(func(t *testing.T, rawQuery, token string, exp int64, op string) {
		q, _ := url.ParseQuery(rawQuery)
		now := time.Unix(1_700_000_000, 0)
		// Whatever signature the query carries, it must not panic.
		_ = VerifySignature(q, op, token, now)

		q.Del("signature_expiration")
		if exp > 0 {
			q.Set("signature_expiration", strconv.FormatInt(exp, 10))
		}
		sig := Sign(q.Get("path"), op, q.Get("username"), token, exp)
		q.Set("signature", sig)
		err := VerifySignature(q, op, token, now)
		switch {
		case exp > 0 && exp < now.Unix():
			if !errors.Is(err, ErrExpiredSignature) {
				t.Fatalf("expired signature: got %v", err)
			}
		case err != nil:
			t.Fatalf("valid signature rejected: %v", err)
		}
		// Any change to the signature is rejected.
		q.Set("signature", sig+"x")
		if err := VerifySignature(q, op, token, now); !errors.Is(err, ErrInvalidSignature) {
			t.Fatalf("tampered signature: got %v", err)
		}
		// A different operation is rejected.
		if err := VerifySignature(url.Values{"path": q["path"], "username": q["username"], "signature": {sig},
			"signature_expiration": q["signature_expiration"]}, op+"!", token, now); !errors.Is(err, ErrInvalidSignature) {
			t.Fatalf("signature accepted for another operation: %v", err)
		}
	})
}
