package middleware

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

func TestWriteError(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteError(rec, http.StatusTeapot, "short and stout")
	if rec.Code != http.StatusTeapot || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d content type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	if got, want := rec.Body.String(), `{"code":418,"message":"short and stout"}`+"\n"; got != want {
		t.Fatalf("body %q, want %q", got, want)
	}
}

func TestKeyRequire(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h := Key("e2b_k").Require(func(r *http.Request) bool { return r.URL.Path == "/health" }, ok)
	for _, tc := range []struct {
		path, header, value string
		want                int
	}{
		{"/x", "X-API-Key", "e2b_k", http.StatusNoContent},
		{"/x", "Authorization", "Bearer e2b_k", http.StatusNoContent},
		{"/x", "X-API-Key", "e2b_wrong", http.StatusUnauthorized},
		{"/x", "", "", http.StatusUnauthorized},
		{"/health", "", "", http.StatusNoContent},
	} {
		r := httptest.NewRequest("GET", tc.path, nil)
		if tc.header != "" {
			r.Header.Set(tc.header, tc.value)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != tc.want {
			t.Errorf("%s %s=%q: status %d, want %d", tc.path, tc.header, tc.value, rec.Code, tc.want)
		}
		if rec.Code == http.StatusUnauthorized {
			var e airlock.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code != 401 || e.Message != UnauthorizedMessage {
				t.Errorf("401 body %q (%v)", rec.Body.String(), err)
			}
		}
	}
	if Key("").Valid("") || Key("").Valid("x") {
		t.Fatal("an empty key accepted a request")
	}
}

func TestRequestID(t *testing.T) {
	var seen string
	h := RequestID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = RequestIDFrom(r.Context()) }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if got := rec.Header().Get(HeaderRequestID); len(got) != 16 || got != seen {
		t.Fatalf("generated id %q, handler saw %q", got, seen)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set(HeaderRequestID, "caller-1")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if got := rec.Header().Get(HeaderRequestID); got != "caller-1" || seen != "caller-1" {
		t.Fatalf("caller's id not kept: response %q, handler %q", got, seen)
	}
	r.Header.Set(HeaderRequestID, strings.Repeat("x", 200))
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if got := rec.Header().Get(HeaderRequestID); len(got) != 16 {
		t.Fatalf("an overlong caller id was kept: %q", got)
	}
}
