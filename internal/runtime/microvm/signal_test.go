//go:build linux

package microvm

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/guest"
)

func TestPostClock(t *testing.T) {
	t.Parallel()
	var got string
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get(guest.HeaderHostTime)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer ok.Close()
	if err := postClock(context.Background(), agentAt(t, ok.URL), "127.0.0.1"); err != nil {
		t.Fatalf("postClock to an agent answering 204: %v", err)
	}
	if _, err := time.Parse(time.RFC3339Nano, got); err != nil {
		t.Errorf("%s = %q, want an RFC 3339 time", guest.HeaderHostTime, got)
	}

	// An agent that cannot reseed its RNG answers 500: that is a refusal
	// (the restore must fail), not an unreachable guest (only logged).
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "reseeding the kernel RNG: no answer", http.StatusInternalServerError)
	}))
	defer refusing.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := postClock(ctx, agentAt(t, refusing.URL), "127.0.0.1")
	var refused *guest.RefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "reseeding the kernel RNG") {
		t.Fatalf("postClock to a refusing agent = %v, want a *guest.RefusedError naming the cause", err)
	}
}

// agentAt is a client of the test agent listening at url (on 127.0.0.1).
func agentAt(t *testing.T, url string) *guest.Client {
	t.Helper()
	_, port, err := net.SplitHostPort(strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return &guest.Client{Port: n}
}
