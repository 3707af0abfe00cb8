package proxy

import (
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
)

// A client that sends its API key along with sandbox traffic (X-API-Key, or
// Authorization: Bearer <key>, as it does to the API) must not hand it to
// the code in the sandbox, which is untrusted. The headers are removed only
// when they carry the key: both are ordinary headers of the apps users run
// in sandboxes (an app's own API key, HTTP authentication), and on the
// agent's port Authorization: Basic <user:> selects the user of a process
// or file operation (E2B's envd protocol; it carries no secret).

// apiKeyHeaders are the headers an API key travels in.
var apiKeyHeaders = []string{"X-Api-Key", "Authorization"}

// stripAPIKey removes every apiKeyHeaders header of h that carries key
// (no-op for an empty key).
func stripAPIKey(h http.Header, key string) {
	if key == "" {
		return
	}
	for _, name := range apiKeyHeaders {
		for _, v := range h.Values(name) {
			if carriesKey(v, key) {
				h.Del(name)
				break
			}
		}
	}
}

// carriesKey reports whether a header value is key, "<scheme> key", or
// Basic credentials with key as the user name or the password.
func carriesKey(v, key string) bool {
	v = strings.TrimSpace(v)
	cands := []string{v}
	if scheme, rest, ok := strings.Cut(v, " "); ok {
		rest = strings.TrimSpace(rest)
		cands = append(cands, rest)
		if strings.EqualFold(scheme, "basic") {
			if b, err := base64.StdEncoding.DecodeString(rest); err == nil {
				user, pass, _ := strings.Cut(string(b), ":")
				cands = append(cands, user, pass)
			}
		}
	}
	found := 0
	for _, c := range cands {
		found |= subtle.ConstantTimeCompare([]byte(c), []byte(key))
	}
	return found == 1
}
