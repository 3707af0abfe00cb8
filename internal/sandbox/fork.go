package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/store"
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
// namespace, with a new id, access token and address, and re-initialised
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
	if err := m.checkTimeout(timeout); err != nil {
		return nil, err
	}
	e, err := m.beginOp(ctx, id, opForking, false)
	if err != nil {
		return nil, err
	}
	// Until the parent runs again (possibly after Fork returned) the
	// operation stays marked: the proxy waits for it, pause/fork get 409.
	parentBack := false
	defer func() {
		if !parentBack {
			m.endOp(e)
		}
	}()
	cp, err := m.checkpointer()
	if err != nil {
		return nil, err
	}
	if err := m.checkPauseSpace(ctx, id); err != nil {
		return nil, err
	}
	cl := m.caps.Cloner
	if cl == nil {
		return nil, userErrorf(http.StatusNotImplemented, "the %q runtime cannot fork sandboxes", m.cfg.Runtime.Name())
	}
	m.mu.Lock()
	parent := e.rec
	parent.Metadata = maps.Clone(e.rec.Metadata)
	parent.EnvVars = maps.Clone(e.rec.EnvVars)
	ip := e.guestIP
	m.mu.Unlock()
	tpl, err := m.templateOf(ctx, &parent)
	if err != nil {
		return nil, fmt.Errorf("resolving template %q of %s: %w", parent.TemplateID, id, err)
	}
	if tpl.Hash != parent.TemplateHash {
		return nil, userErrorf(http.StatusConflict, "template %q was rebuilt since sandbox %q was created; it cannot be forked", parent.TemplateID, id)
	}

	start := time.Now()
	dir := m.sandboxDir(id)
	img := m.imageDir(id)
	if _, step, err := m.checkpointLive(ctx, cp, id, e, ip, "a fork"); err != nil {
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
		k, err := m.prepareChild(ctx, &parent, tpl, parent.AccessToken != "", func(ctx context.Context, spec runtime.Spec) error {
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
	// parent and the children are up.
	parentBack = true
	parentDone := make(chan error, 1)
	m.bringBack(ctx, cp, id, e, ip, func(err error) { parentDone <- err })
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
	started := 0
	for _, r := range results {
		if r.Err == nil {
			started++
		}
	}
	m.log.Info("sandbox forked", "sandbox", id, "count", count, "started", started, "checkpoint", checkpointed,
		"copy", copied-checkpointed, "elapsed", time.Since(start))
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		if err := <-parentDone; err != nil {
			return // the image is the paused parent's checkpoint now
		}
		m.log.Debug("fork parent running again", "sandbox", id, "downtime", time.Since(start))
		if err := os.RemoveAll(img); err != nil {
			m.log.Warn("removing fork checkpoint", "sandbox", id, "err", err)
		}
	}()
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

// child is a fork child between preparation and start.
type child struct {
	id, token string
	slot      int
	ep        *network.Endpoint
	spec      runtime.Spec
	// baseEnv is set under the parent's env vars at /init (template env of
	// sandboxes restored from a snapshot).
	baseEnv map[string]string
}

// prepareChild allocates the child's id, token (when secure), slot and
// network, and lets clone prepare its directory (a copy of the stopped
// parent's, or of a saved snapshot).
func (m *Manager) prepareChild(ctx context.Context, parent *store.Sandbox, tpl *Template, secure bool,
	clone func(context.Context, runtime.Spec) error) (*child, error) {
	id, err := newID()
	if err != nil {
		return nil, err
	}
	k := &child{id: id}
	if secure {
		if k.token, err = newToken(); err != nil {
			return nil, err
		}
	}
	if k.slot, err = m.reserveSlot(id); err != nil {
		return nil, err
	}
	fail := func(err error) (*child, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if rerr := m.release(cctx, id, k.slot, m.sandboxDir(id)); rerr != nil {
			m.log.Error("cleaning up failed fork child", "sandbox", id, "err", rerr)
		}
		return nil, err
	}
	k.ep, err = m.cfg.Network.Setup(ctx, id, k.slot, network.Options{AllowInternet: parent.AllowInternet, Egress: parentEgress(parent)})
	if err != nil {
		return fail(fmt.Errorf("setting up network: %w", err))
	}
	m.cfg.Conns.Abort(k.ep.GuestIP)
	agent, err := m.agentOf(parent)
	if err != nil {
		return fail(err)
	}
	k.spec = runtime.Spec{
		ID:          id,
		RootFS:      tpl.RootFS,
		Dir:         m.sandboxDir(id),
		NetNSPath:   k.ep.NetNSPath,
		AgentPath:   agent,
		Hostname:    id,
		Nameservers: append([]string(nil), m.cfg.Nameservers...),
		Hosts:       []string{"127.0.0.1 " + id},
		Resources: runtime.Resources{
			CPUCount: parent.CPUCount,
			MemoryMB: parent.MemoryMB,
			DiskMB:   parent.DiskSizeMB,
		},
	}
	if err := clone(ctx, k.spec); err != nil {
		return fail(fmt.Errorf("copying sandbox: %w", err))
	}
	return k, nil
}

// startChild restores a prepared child from the parent's image, gives its
// agent a fresh identity and registers it.
func (m *Manager) startChild(ctx context.Context, cp runtime.Checkpointer, k *child, parent *store.Sandbox, img string, timeout time.Duration) (sb *Sandbox, err error) {
	defer func() {
		if err != nil {
			m.releaseChild(ctx, k)
		}
	}()
	if err := m.wakeChild(ctx, cp, k, img); err != nil {
		return nil, err
	}
	return m.registerChild(ctx, k, parent, timeout)
}

// releaseChild undoes prepareChild (and a restore).
func (m *Manager) releaseChild(ctx context.Context, k *child) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if rerr := m.release(cctx, k.id, k.slot, k.spec.Dir); rerr != nil {
		m.log.Error("cleaning up failed fork child", "sandbox", k.id, "err", rerr)
	}
}

// wakeChild restores a prepared child from img, lets its agent listen again
// and waits for its /health. The caller cleans up on error.
func (m *Manager) wakeChild(ctx context.Context, cp runtime.Checkpointer, k *child, img string) error {
	if err := cp.Restore(ctx, k.spec, img); err != nil {
		return fmt.Errorf("restoring fork child: %w", err)
	}
	if err := cp.Signal(ctx, k.id, syscall.SIGUSR1); err != nil {
		return fmt.Errorf("waking fork child: %w", err)
	}
	if err := m.waitAgent(ctx, k.id, k.spec.Dir, k.ep.GuestIP.String()); err != nil {
		return fmt.Errorf("fork child agent did not become healthy: %w", err)
	}
	return nil
}

// registerChild gives a woken child its identity (/init: id, token, env
// vars, clock; authorised by the parent's token), stores and registers it.
// The caller cleans up on error.
func (m *Manager) registerChild(ctx context.Context, k *child, parent *store.Sandbox, timeout time.Duration) (*Sandbox, error) {
	host := k.ep.GuestIP.String()
	envs := maps.Clone(k.baseEnv)
	if envs == nil {
		envs = map[string]string{}
	}
	maps.Copy(envs, parent.EnvVars)
	envs["E2B_SANDBOX"] = "true"
	envs["E2B_SANDBOX_ID"] = k.id
	envs["E2B_TEMPLATE_ID"] = parent.TemplateID
	body := guest.InitRequest{EnvVars: envs, Timestamp: time.Now().UTC(), DefaultUser: DefaultUser,
		DefaultWorkdir: DefaultWorkdir}
	if k.token != "" {
		body.AccessToken = &k.token
	}
	if err := m.agent.Init(ctx, host, body, parent.AccessToken); err != nil {
		return nil, fmt.Errorf("initialising fork child: %w", err)
	}
	now := time.Now().UTC()
	rec := *parent
	rec.ID = k.id
	rec.State = StateRunning
	rec.Slot = k.slot
	rec.GuestIP = host
	rec.AccessToken = k.token
	rec.TrafficToken = ""
	rec.Metadata = maps.Clone(parent.Metadata)
	rec.EnvVars = maps.Clone(parent.EnvVars)
	rec.StartedAt = now
	rec.EndAt = now.Add(timeout)
	if err := m.cfg.Store.PutSandbox(ctx, &rec); err != nil {
		return nil, fmt.Errorf("saving fork child: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, userErrorf(http.StatusServiceUnavailable, "server is shutting down")
	}
	e := &entry{rec: rec, guestIP: k.ep.GuestIP}
	m.sandboxes[k.id] = e
	m.armLocked(k.id, e)
	return snapshot(e), nil
}
