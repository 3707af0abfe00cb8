// Package middleware is the daemon's one HTTP middleware stack, shared by
// the REST API (internal/api), the sandbox proxy (internal/proxy) and the
// web console (internal/console): API-key auth, E2B-shaped error bodies,
// JSON responses and request ids.
package middleware

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// WriteJSON writes v as the JSON body of a status response.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError writes an E2B error body {"code":status,"message":msg}
// (airlock.Error, the client's type too).
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, airlock.Error{Code: status, Message: msg})
}

// UnauthorizedMessage is the message of every 401 for a missing or wrong
// API key.
const UnauthorizedMessage = "Invalid API key"

// Key is the daemon's API key ("" refuses every key).
type Key string

// Valid reports, in constant time, whether got is the key.
func (k Key) Valid(got string) bool {
	if got == "" || k == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(k)) == 1
}

// Presented returns the key r carries: X-API-Key, else
// "Authorization: Bearer <key>" (what Prometheus scrapers send).
func Presented(r *http.Request) string {
	got := r.Header.Get("X-API-Key")
	if got == "" {
		got, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	return got
}

// Authorized reports whether r carries the key.
func (k Key) Authorized(r *http.Request) bool { return k.Valid(Presented(r)) }

// Require answers 401 (E2B error body) to requests without the key, except
// those public reports true for (public may be nil), and passes the rest
// to next.
func (k Key) Require(public func(*http.Request) bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (public == nil || !public(r)) && !k.Authorized(r) {
			WriteError(w, http.StatusUnauthorized, UnauthorizedMessage)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// HeaderRequestID carries a request's id, in requests (a caller's own id,
// kept when it is short and printable) and in every response.
const HeaderRequestID = "X-Request-Id"

type requestIDKey struct{}

// RequestID gives every request an id: the caller's X-Request-Id when
// usable, else a new random one. The id is set on the response and in the
// request's context (RequestIDFrom) for logs.
func RequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(HeaderRequestID)
		if !usableID(id) {
			id = newID()
		}
		w.Header().Set(HeaderRequestID, id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id)))
	})
}

// RequestIDFrom returns the id RequestID gave the request of ctx ("" when
// none).
func RequestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

func usableID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// SetCORS lets browser SDKs call the API: the request's Origin (or *), the
// methods and headers they send, and the response headers they may read
// (X-Next-Token, X-Total-Running and expose).
func SetCORS(w http.ResponseWriter, r *http.Request, expose ...string) {
	hdr := w.Header()
	origin := r.Header.Get("Origin")
	if origin == "" {
		origin = "*"
	} else {
		hdr.Add("Vary", "Origin")
	}
	hdr.Set("Access-Control-Allow-Origin", origin)
	hdr.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE, OPTIONS")
	allow := "Content-Type, X-API-Key, Authorization, User-Agent, browser, lang, lang_version, package_version, publisher, sdk_runtime, system"
	if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
		allow = req
	}
	hdr.Set("Access-Control-Allow-Headers", allow)
	hdr.Set("Access-Control-Expose-Headers", strings.Join(append([]string{"X-Next-Token", "X-Total-Running"}, expose...), ", "))
	hdr.Set("Access-Control-Max-Age", "600")
}
