package sandboxtest

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Fake runtimes that checkpoint, clone and save layers, layered on
// Runtime: what the pause, fork, snapshot and move tests run on (issue
// 25: here, so that the move and upload tests can live next to their code
// in internal/cluster/node).

// CkRuntime adds runtime.Checkpointer to the fake runtime.
type CkRuntime struct {
	*Runtime
	// Mu guards the fields below.
	Mu          sync.Mutex
	Checkpoints int
	Restores    int
	Signals     []syscall.Signal
	FailCk      bool
	// CkHook, when set, runs at the start of Checkpoint (without Mu).
	CkHook func(id string)
	// RestoreHook, when set, runs at the start of Restore (without Mu);
	// its error is Restore's.
	RestoreHook func(id string) error
	// RestoreCtxHook, when set, runs at the start of Restore (without Mu)
	// with Restore's context; its error is Restore's.
	RestoreCtxHook func(ctx context.Context, id string) error
}

// Caps states what CkRuntime adds to the fake runtime.
func (r *CkRuntime) Caps() runtime.Caps {
	c := r.Runtime.Caps()
	c.Checkpointer = r
	return c
}

func (r *CkRuntime) Checkpoint(ctx context.Context, id, dir, imageDir string) error {
	r.Mu.Lock()
	hook := r.CkHook
	r.Mu.Unlock()
	if hook != nil {
		hook(id)
	}
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if r.FailCk {
		return ErrBoom
	}
	r.Checkpoints++
	if err := os.MkdirAll(imageDir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(imageDir, "checkpoint.img"), []byte("img"), 0o600)
}

func (r *CkRuntime) Restore(ctx context.Context, spec runtime.Spec, imageDir string) error {
	r.Mu.Lock()
	hook, ctxHook := r.RestoreHook, r.RestoreCtxHook
	r.Mu.Unlock()
	if hook != nil {
		if err := hook(spec.ID); err != nil {
			return err
		}
	}
	if ctxHook != nil {
		if err := ctxHook(ctx, spec.ID); err != nil {
			return err
		}
	}
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if _, err := os.Stat(filepath.Join(imageDir, "checkpoint.img")); err != nil {
		return err
	}
	r.Restores++
	return nil
}

func (r *CkRuntime) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	r.Signals = append(r.Signals, sig)
	return nil
}

// Counts returns the checkpoints, restores and signals so far.
func (r *CkRuntime) Counts() (int, int, int) {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	return r.Checkpoints, r.Restores, len(r.Signals)
}

// CloneRuntime adds runtime.Cloner to CkRuntime.
type CloneRuntime struct {
	*CkRuntime
	Mu     sync.Mutex
	Clones []runtime.Spec
	Fail   bool
}

// Caps states what CloneRuntime adds to CkRuntime.
func (r *CloneRuntime) Caps() runtime.Caps {
	c := r.CkRuntime.Caps()
	c.Checkpointer, c.Cloner = r, r
	return c
}

func (r *CloneRuntime) Clone(ctx context.Context, parentDir string, spec runtime.Spec) error {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if r.Fail {
		return os.ErrPermission
	}
	r.Clones = append(r.Clones, spec)
	return r.Start(ctx, spec)
}

// SnapRuntime adds runtime.LayerSaver (and runtime.ImageBuilder) to
// CloneRuntime.
type SnapRuntime struct {
	*CloneRuntime
	// Mu guards the fields below.
	Mu     sync.Mutex
	Saved  int
	Loaded []string // src dirs of CloneSaved
	// Gate, when set, blocks CloneSaved until it is closed.
	Gate chan struct{}
	// CloneSavedErr makes CloneSaved fail.
	CloneSavedErr error
	// Build is the runtime build its images need (runtime.ImageBuilder).
	Build string
}

// Caps states what SnapRuntime adds to CloneRuntime.
func (r *SnapRuntime) Caps() runtime.Caps {
	c := r.CloneRuntime.Caps()
	c.Checkpointer, c.Cloner, c.LayerSaver, c.ImageBuilder = r, r, r, r
	return c
}

func (r *SnapRuntime) ImageBuild() string {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	return r.Build
}

func (r *SnapRuntime) SaveLayer(ctx context.Context, dir, dst string) error {
	r.Mu.Lock()
	r.Saved++
	r.Mu.Unlock()
	return os.WriteFile(filepath.Join(dst, "disk.img"), []byte("layer of "+filepath.Base(dir)), 0o600)
}

func (r *SnapRuntime) CloneSaved(ctx context.Context, src string, spec runtime.Spec) error {
	r.Mu.Lock()
	gate := r.Gate
	r.Loaded = append(r.Loaded, src)
	failErr := r.CloneSavedErr
	r.Mu.Unlock()
	if failErr != nil {
		return failErr
	}
	if gate != nil {
		<-gate
	}
	if _, err := os.Stat(filepath.Join(src, "disk.img")); err != nil {
		return err
	}
	return r.Start(ctx, spec)
}

// SnapEnv is an Env on a SnapRuntime whose agent accepts /freeze; mutate,
// when set, adjusts the config before New (after the runtime is set).
func SnapEnv(t testing.TB, mutate func(*sandbox.Config)) (*Env, *SnapRuntime) {
	t.Helper()
	var rt *SnapRuntime
	env := NewEnv(t, func(c *sandbox.Config) {
		rt = &SnapRuntime{CloneRuntime: &CloneRuntime{CkRuntime: &CkRuntime{Runtime: c.Runtime.(*Runtime)}}}
		c.Runtime = rt
		if mutate != nil {
			mutate(c)
		}
	})
	env.Agent.Extra = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/freeze" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return env, rt
}
