package sandbox_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// stepLog is an Observer that records forward steps.
type stepLog struct {
	sandbox.Observer
	mu    sync.Mutex
	steps []string // "op/kind/step"
	total time.Duration
}

func (l *stepLog) Step(op, kind, step string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.steps = append(l.steps, op+"/"+kind+"/"+step)
	l.total += d
}

func (l *stepLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.steps
	l.steps = nil
	return s
}

type nopObs struct{}

func (nopObs) Created(*sandbox.Sandbox, time.Duration) {}
func (nopObs) CreateFailed(error, time.Duration)       {}
func (nopObs) Removed(string)                          {}
func (nopObs) Stopped(string, string)                  {}

func want(kind string, op string, names ...string) []string {
	var out []string
	for _, n := range names {
		out = append(out, fmt.Sprintf("%s/%s/%s", op, kind, n))
	}
	return out
}

// A cold create, a pause and a resume each run their documented steps in
// order and tell a StepObserver; a create that fails at a step stops there.
func TestStepsOfCreatePauseResume(t *testing.T) {
	t.Parallel()
	obs := &stepLog{Observer: nopObs{}}
	var rt *ckRuntime
	env := sandboxtest.NewEnv(t, func(c *sandbox.Config) {
		rt = &ckRuntime{Runtime: c.Runtime.(*sandboxtest.Runtime)}
		c.Runtime = rt
		c.Observer = obs
	})
	env.Agent.Extra = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	ctx := context.Background()
	begin := time.Now()
	sb := create(t, env, sandbox.CreateRequest{Timeout: time.Hour})
	elapsed := time.Since(begin)
	if got, w := obs.take(), want("cold", "create", "network", "start", "wait", "init", "register"); !slices.Equal(got, w) {
		t.Fatalf("create steps %v, want %v", got, w)
	}
	if obs.total > elapsed {
		t.Fatalf("create steps took %v, more than the create (%v)", obs.total, elapsed)
	}
	if err := pause(env.Manager, ctx, sb.ID); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if got, w := obs.take(), want("memory", "pause", "space", "clear", "freeze", "checkpoint", "commit"); !slices.Equal(got, w) {
		t.Fatalf("pause steps %v, want %v", got, w)
	}
	if _, err := resume(env.Manager, ctx, sb.ID, time.Hour); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if got, w := obs.take(), want("memory", "resume", "readdress", "restore", "wake", "wait", "commit"); !slices.Equal(got, w) {
		t.Fatalf("resume steps %v, want %v", got, w)
	}

	rt.StartErr = sandboxtest.ErrBoom
	if _, err := env.Manager.Create(ctx, sandbox.CreateRequest{Timeout: time.Hour}); err == nil {
		t.Fatal("create succeeded with a failing runtime")
	}
	if got, w := obs.take(), want("cold", "create", "network"); !slices.Equal(got, w) {
		t.Fatalf("steps of a create failing at start %v, want %v", got, w)
	}
}
