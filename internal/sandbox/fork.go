package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// MaxForkCount bounds one fork request (E2B's SandboxForkRequest maximum).
const MaxForkCount = 100

// forkMemReserveMB is host memory a fork leaves free, and forkChildOverheadMB
// what a child costs beyond its memoryMB (the runtime's own processes).
const (
	forkMemReserveMB    = 512
	forkChildOverheadMB = 64
)

// forkParallelism is how many children are restored at once.
const forkParallelism = 4

// ForkResult is one child of a fork: the sandbox or the error that
// prevented it from starting.
type ForkResult struct {
	Sandbox *Sandbox
	Err     error
}

// Fork copies a running sandbox count times. The parent is frozen and
// checkpointed, its writable layer is copied for every child, then the
// parent is restored (same id, tokens and expiry) and every child is
// restored from the same image into its own directory and network
// namespace, with a new id, access token, traffic token (when the parent
// has one) and address, and re-initialised
// (/init: env vars, token, clock). Children expire timeout from now.
//
// Errors before any child was attempted (unknown parent, paused, bad
// count, runtime without checkpoints, refused freeze) are returned as err;
// per-child failures are in the results.
func (m *Manager) Fork(ctx context.Context, id string, count int, timeout time.Duration) ([]ForkResult, error) {
	if count < 1 || count > MaxForkCount {
		return nil, userErrorf(http.StatusBadRequest, "count must be between 1 and %d", MaxForkCount)
	}
	if timeout <= 0 {
		return nil, userErrorf(http.StatusBadRequest, "timeout must be positive")
	}
	if err := m.CheckTimeout(timeout); err != nil {
		return nil, err
	}
	e, err := m.Lookup(id)
	if err != nil {
		return nil, err
	}
	if err := e.beginOp(ctx, opForking, false); err != nil {
		return nil, err
	}
	// Until the parent runs again (possibly after Fork returned) the
	// operation stays marked: the proxy waits for it, pause/fork get 409.
	parentBack := false
	defer func() {
		if !parentBack {
			e.endOp()
		}
	}()
	cp, err := m.checkpointer()
	if err != nil {
		return nil, err
	}
	if err := e.checkPauseSpace(ctx); err != nil {
		return nil, err
	}
	cl := m.caps.Cloner
	if cl == nil {
		return nil, userErrorf(http.StatusNotImplemented, "the %q runtime cannot fork sandboxes", m.cfg.Runtime.Name())
	}
	parent := e.record()
	tpl, err := m.unchangedTemplate(ctx, &parent, "forked")
	if err != nil {
		return nil, err
	}

	start := time.Now()
	dir := m.sandboxDir(id)
	img := m.imageDir(id)
	if _, step, err := e.checkpointLive(ctx, cp, "a fork", m.newSteps(opFork, kindParent, id)); err != nil {
		if step == checkpointStop {
			return nil, hostDiskFull(fmt.Errorf("checkpointing sandbox %s for a fork (the sandbox was stopped): %w", id, err),
				fmt.Sprintf("forking sandbox %s failed and the sandbox was stopped", id))
		}
		return nil, err
	}
	checkpointed := time.Since(start)

	// Children's layers are copied while the parent is stopped. Only the
	// children whose memory fits on the host are attempted; the others get
	// their error in their entry (E2B answers per child).
	kids := make([]*child, count)
	results := make([]ForkResult, count)
	fit := m.forkChildrenThatFit(count, parent.MemoryMB)
	for i := range kids {
		if i >= fit {
			results[i].Err = userErrorf(http.StatusServiceUnavailable,
				"not enough host memory for fork child %d of %d: %d of them (%d MiB each) fit", i+1, count, fit, parent.MemoryMB)
			continue
		}
		k, err := m.prepareChild(ctx, m.newSteps(opCreate, kindFork, ""), &parent, tpl, childTokens{access: parent.AccessToken != "", traffic: parent.TrafficToken != ""}, func(ctx context.Context, spec runtime.Spec) error {
			return cl.Clone(ctx, dir, spec)
		})
		if err != nil {
			results[i].Err = err
			continue
		}
		kids[i] = k
	}
	copied := time.Since(start)

	// The parent comes back alongside the children, and Fork does not wait
	// for it (runsc needs ~1 s to delete the stopped parent before it can
	// be restored under the same id). The image is removed once both the
	// parent and the children are up, before the parent's operation ends:
	// a pause or snapshot of the parent starting later writes its own image
	// to the same place, and children still restoring need this one.
	parentBack = true
	childrenDone := make(chan struct{})
	e.bringBack(ctx, cp, func(err error) {
		if err != nil {
			return // the image is the paused parent's checkpoint now
		}
		<-childrenDone
		m.log.Debug("fork parent running again", "sandbox", id, "downtime", time.Since(start))
		if err := os.RemoveAll(img); err != nil {
			m.log.Warn("removing fork checkpoint", "sandbox", id, "err", err)
		}
	})
	var wg sync.WaitGroup
	sem := make(chan struct{}, forkParallelism)
	for i, k := range kids {
		if k == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sb, err := m.startChild(ctx, cp, k, &parent, img, timeout)
			results[i] = ForkResult{Sandbox: sb, Err: err}
		}()
	}
	wg.Wait()
	close(childrenDone)
	started := 0
	for _, r := range results {
		if r.Err == nil {
			started++
		}
	}
	m.log.Info("sandbox forked", "sandbox", id, "count", count, "started", started, "checkpoint", checkpointed,
		"copy", copied-checkpointed, "elapsed", time.Since(start))
	return results, nil
}

// forkChildrenThatFit is how many children of memMB each the host's
// available memory holds, keeping forkMemReserveMB free (all of them when
// the available memory cannot be read).
func (m *Manager) forkChildrenThatFit(count, memMB int) int {
	avail, err := m.cfg.HostMemAvailable()
	if err != nil {
		m.log.Warn("fork: host memory unknown; not limiting children", "err", err)
		return count
	}
	per := int64(memMB+forkChildOverheadMB) << 20
	n := (avail - forkMemReserveMB<<20) / per
	return int(max(0, min(int64(count), n)))
}

// hostMemAvailable reads MemAvailable from /proc/meminfo, in bytes.
func hostMemAvailable() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("reading meminfo: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parsing MemAvailable %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no MemAvailable in /proc/meminfo")
}
