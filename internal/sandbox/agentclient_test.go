package sandbox_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/processpb"
)

func TestProcessClient(t *testing.T) {
	t.Parallel()
	env := sandboxtest.NewEnv(t, nil)
	var mu sync.Mutex
	var got http.Header
	env.Agent.Extra = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/process.Process/List" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"processes":[{"pid":7,"config":{"cmd":"/bin/bash"}}]}`))
	})
	sb := create(t, env, sandbox.CreateRequest{})

	pc, err := env.Manager.ProcessClient(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	res, err := pc.List(context.Background(), connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if ps := res.Msg.GetProcesses(); len(ps) != 1 || ps[0].GetPid() != 7 {
		t.Fatalf("processes %v, want pid 7", ps)
	}
	mu.Lock()
	defer mu.Unlock()
	if got.Get("X-Access-Token") != sb.AccessToken {
		t.Errorf("X-Access-Token %q, want the sandbox's token", got.Get("X-Access-Token"))
	}
	if a := got.Get("Authorization"); a != "" {
		t.Errorf("Authorization %q, want none (the agent's default user)", a)
	}

	if _, err := env.Manager.ProcessClient("inope"); !sandbox.IsNotFound(err) {
		t.Errorf("unknown sandbox: %v, want a 404 user error", err)
	}
	if err := env.Manager.Kill(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Manager.ProcessClient(sb.ID); !sandbox.IsNotFound(err) {
		t.Errorf("killed sandbox: %v, want a 404 user error", err)
	}
}
