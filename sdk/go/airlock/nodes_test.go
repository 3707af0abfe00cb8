package airlock

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestDrainReadsTheAnswer: Drain sends no body and returns the api tier's
// answer, what moved and what could not. (It used to send its empty answer
// as the request body and return it, so `airlock node drain` reported
// nothing and exited 0 when sandboxes could not move.)
func TestDrainReadsTheAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/airlock/v1/nodes/n1/drain" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.String(), http.StatusNotFound)
			return
		}
		if b, _ := io.ReadAll(r.Body); len(b) != 0 {
			http.Error(w, "a drain takes no body, got "+string(b), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"n1","state":"draining","moved":[{"sandboxId":"a","node":"n2","state":"running","was":"running"}],"failed":[{"sandboxId":"b","error":"sandbox \"b\" was paused without its memory and cannot move to another node"}]}`)
	}))
	defer srv.Close()
	res, err := New(srv.URL, "k").Drain(context.Background(), "n1", true)
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if res.ID != "n1" || res.State != "draining" || len(res.Moved) != 1 || res.Moved[0].Node != "n2" || len(res.Failed) != 1 || res.Failed[0].SandboxID != "b" || res.Failed[0].Error == "" {
		t.Fatalf("Drain returned %+v, want the answer (n1 draining, a moved to n2, b failed)", res)
	}
}
