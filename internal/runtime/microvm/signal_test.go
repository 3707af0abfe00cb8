//go:build linux

package microvm

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestPostClock(t *testing.T) {
	t.Parallel()
	var got string
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get(clockHeader)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer ok.Close()
	if err := postClock(context.Background(), ok.URL+"/freeze"); err != nil {
		t.Fatalf("postClock to an agent answering 204: %v", err)
	}
	if _, err := time.Parse(time.RFC3339Nano, got); err != nil {
		t.Errorf("%s = %q, want an RFC 3339 time", clockHeader, got)
	}

	// An agent that cannot reseed its RNG answers 500: that is a refusal
	// (the restore must fail), not an unreachable guest (only logged).
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "reseeding the kernel RNG: no answer", http.StatusInternalServerError)
	}))
	defer refusing.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := postClock(ctx, refusing.URL+"/freeze")
	var refused *agentRefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "reseeding the kernel RNG") {
		t.Fatalf("postClock to a refusing agent = %v, want an *agentRefusedError naming the cause", err)
	}
}
