package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestNodeCommands(t *testing.T) {
	var (
		mu      sync.Mutex
		drained []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") != fakeKey {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch {
		case r.Method == "GET" && r.URL.Path == "/airlock/v1/nodes":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`[{"id":"n1","addr":"10.0.0.1:7000","state":"live","runtime":"gvisor","labels":["ssd"],"cpus":8,"memoryMB":16000,
				"maxSandboxes":100,"reservedCpus":4,"reservedMemoryMB":1024,"sandboxes":2,"heartbeatAgeMs":1500,"startedAt":"2026-11-25T00:00:00Z"},
				{"id":"n2","addr":"10.0.0.2:7000","state":"lost","runtime":"gvisor","labels":[],"cpus":8,"memoryMB":16000,"maxSandboxes":100,
				"heartbeatAgeMs":30000,"startedAt":"2026-11-25T00:00:00Z","lostAt":"2026-11-25T01:00:00Z"}]`))
		case r.Method == "POST" && strings.HasPrefix(r.URL.Path, "/airlock/v1/nodes/"):
			if strings.Contains(r.URL.Path, "/nope/") {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				w.Write([]byte(`{"code":404,"message":"node \"nope\" not found"}`))
				return
			}
			mu.Lock()
			drained = append(drained, strings.TrimPrefix(r.URL.Path, "/airlock/v1/nodes/"))
			mu.Unlock()
			// The api tier's answer (gateway.setNodeState): what moved, and
			// what could not.
			w.Header().Set("Content-Type", "application/json")
			switch {
			case strings.Contains(r.URL.Path, "/stuck/drain"):
				w.Write([]byte(`{"id":"stuck","state":"draining","moved":[{"sandboxId":"ia","node":"n2","state":"running","was":"running"}],
					"failed":[{"sandboxId":"ib","error":"sandbox \"ib\" was paused without its memory and cannot move to another node"}]}`))
			default:
				w.Write([]byte(`{"id":"n1","state":"draining","moved":[],"failed":[]}`))
			}
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	cli := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		root := NewRoot()
		var out, errb bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errb)
		root.SetArgs(append([]string{"--url", srv.URL, "--api-key", fakeKey}, args...))
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}
	out, err := cli("node", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NODE", "n1", "live", "2/100", "4/8", "1024/16000 MiB", "1.5s ago", "ssd", "n2", "lost"} {
		if !strings.Contains(out, want) {
			t.Errorf("node ls output lacks %q:\n%s", want, out)
		}
	}
	if _, err := cli("node", "drain", "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli("node", "undrain", "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli("node", "drain", "nope"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("drain of an unknown node: %v", err)
	}
	// A drain that leaves a sandbox behind says so and fails (the CLI
	// exits 1): it used to print the node alone and succeed.
	root := NewRoot()
	var out2, errb bytes.Buffer
	root.SetOut(&out2)
	root.SetErr(&errb)
	root.SetArgs([]string{"--url", srv.URL, "--api-key", fakeKey, "node", "drain", "stuck"})
	err = root.ExecuteContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), "1 sandboxes could not move") {
		t.Errorf("drain of a node whose sandbox cannot move: err %v, want one that says a sandbox could not move", err)
	}
	if s := errb.String(); !strings.Contains(s, "moved ia to n2 (running)") || !strings.Contains(s, `not moved ib: sandbox "ib" was paused without its memory`) {
		t.Errorf("drain stderr lacks what moved and what did not:\n%s", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(drained, " ") != "n1/drain n1/undrain stuck/drain" {
		t.Errorf("requests: %v", drained)
	}
}
