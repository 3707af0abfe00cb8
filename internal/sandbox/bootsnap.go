package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/guest"
)

// Boot snapshots: a template is booted once, its agent (and, for
// code-interpreter templates, the warm Python/JavaScript contexts) made
// ready, and the sandbox captured into <data>/snapshots/boot-<hash>/.
// Creates of that template restore the capture instead of cold-booting
// (the restore path: fresh id, token, address, env vars, clock; Python's
// random generators are reseeded by the interpreter when it sees the new
// sandbox id). Any problem falls back to a cold boot.

// bootPrefix names boot snapshot dirs (and their spec files, <dir>.json)
// under snapshots/; InitSnapshots leaves them alone.
const bootPrefix = "boot-"

// internalKey/internalBoot mark the sandbox a boot snapshot is made from
// (destroyed, not re-attached, if the daemon dies meanwhile).
const (
	internalKey  = "airlock.internal"
	internalBoot = "boot-snapshot"
)

// BuildKey marks the sandboxes a template build runs its steps in (the
// value is the template's name); like boot-snapshot sandboxes they are
// destroyed, not re-attached, after a daemon restart.
const BuildKey = "airlock.build"

// bootEntry is a ready boot snapshot.
type bootEntry struct {
	dir    string
	spec   snapshotSpec
	limits Limits // the resolved limits it was booted with
}

// bootFile is what <dir>.json holds next to a boot snapshot dir.
type bootFile struct {
	Spec   snapshotSpec `json:"spec"`
	Limits Limits       `json:"limits"`
	// Warm is true when the template has an interpreter whose warm
	// contexts the snapshot holds.
	// (nil in files written before the field existed: made again).
	Warm *bool `json:"warm"`
}

// errNoWarmState skips the boot snapshot of a template without warm state
// and without a warm pool: restoring it is not faster than a cold boot here
// and a restored sandbox uses about twice the memory (docs/ARCHITECTURE.md).
var errNoWarmState = errors.New("no warm state to keep (no interpreter) and no warm pool: creates cold-boot, which is as fast and uses less memory")

// errOtherAgent: a boot snapshot on disk was made with another build of the
// agent (still restorable, its agent is kept, but creates should get the
// current one).
var errOtherAgent = errors.New("made with another build of the agent")

// errOtherRuntimeBuild: a boot snapshot on disk was saved by another build
// of the runtime (e.g. an upgraded runsc), which cannot restore it.
var errOtherRuntimeBuild = errors.New("saved by another build of the runtime")

// errNotServed: the template is of a kind boot snapshots do not serve (a
// start command, user or workdir); trying again cannot help.
var errNotServed = errors.New("templates with a start command, user or workdir are not served from boot snapshots yet")

// bootAttempts and bootRetryWait bound how often a boot snapshot is tried
// at start: its making boots a sandbox and warms its interpreter, which a
// slow (emulated, loaded) guest can fail once; without a retry the daemon
// would cold-boot that template, and keep no warm pool, until it restarts.
var (
	bootAttempts  = 3
	bootRetryWait = 2 * time.Second
)

// retryBoot calls prepare until it succeeds, fails for good (errNoWarmState,
// errNotServed, a cancelled ctx) or has been tried attempts times, waiting
// wait between tries; it returns the last hash and error.
func retryBoot(ctx context.Context, attempts int, wait time.Duration, log *slog.Logger, name string, prepare func() (string, error)) (string, error) {
	var hash string
	var err error
	for i := 1; ; i++ {
		hash, err = prepare()
		if err == nil || errors.Is(err, errNoWarmState) || errors.Is(err, errNotServed) || ctx.Err() != nil || i >= attempts {
			return hash, err
		}
		log.Warn("boot snapshot failed; trying again", "template", name, "attempt", i, "err", err)
		select {
		case <-ctx.Done():
			return hash, err
		case <-time.After(wait):
		}
	}
}

// bootState holds the ready boot snapshots by template hash.
type bootState struct {
	// mu guards ready.
	mu    sync.Mutex
	ready map[string]*bootEntry
}

func (b *bootState) get(hash string) *bootEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ready[hash]
}

func (b *bootState) set(hash string, e *bootEntry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ready == nil {
		b.ready = map[string]*bootEntry{}
	}
	b.ready[hash] = e
}

// BootSnapshotsSupported reports whether the runtime can serve creates from
// boot snapshots.
func (m *Manager) BootSnapshotsSupported() bool {
	ck := m.caps.Checkpointer != nil
	ls := m.caps.LayerSaver != nil
	return ck && ls
}

// PrepareBootSnapshots makes a boot snapshot for each template (reusing one
// on disk whose manifest verifies) and removes boot snapshots of other
// builds. Errors are per template and logged; creates of a template
// without a boot snapshot cold-boot.
func (m *Manager) PrepareBootSnapshots(ctx context.Context, names []string) {
	keep := map[string]bool{}
	for _, name := range names {
		start := time.Now()
		hash, err := retryBoot(ctx, bootAttempts, bootRetryWait, m.log, name, func() (string, error) {
			return m.PrepareBootSnapshot(ctx, name)
		})
		if hash != "" {
			keep[bootPrefix+hash] = true
			keep[bootPrefix+hash+".json"] = true
		}
		if errors.Is(err, errNoWarmState) {
			m.log.Info("no boot snapshot", "template", name, "why", err)
			continue
		}
		if err != nil {
			m.log.Warn("no boot snapshot; creates cold-boot", "template", name, "err", err)
			continue
		}
		m.log.Info("boot snapshot ready", "template", name, "elapsed", time.Since(start).Round(time.Millisecond))
	}
	ents, _ := os.ReadDir(m.snapshotsDir())
	for _, de := range ents {
		if strings.HasPrefix(de.Name(), bootPrefix) && !keep[de.Name()] {
			if err := os.RemoveAll(filepath.Join(m.snapshotsDir(), de.Name())); err == nil {
				m.log.Info("old boot snapshot removed", "path", de.Name())
			}
		}
	}
}

// PrepareBootSnapshot makes (or verifies) the boot snapshot of one template
// and returns the template's hash.
func (m *Manager) PrepareBootSnapshot(ctx context.Context, name string) (string, error) {
	cp, err := m.checkpointer()
	if err != nil {
		return "", err
	}
	ls := m.caps.LayerSaver
	if ls == nil {
		return "", fmt.Errorf("the %q runtime cannot save sandboxes", m.cfg.Runtime.Name())
	}
	tpl, err := m.cfg.Templates.Resolve(ctx, name)
	if err != nil {
		return "", fmt.Errorf("resolving template: %w", err)
	}
	if tpl.StartCmd != "" || tpl.User != "" || tpl.Workdir != "" {
		return tpl.Hash, errNotServed
	}
	if !m.pooled(name) && !hasInterpreter(tpl.RootFS) {
		// Nothing warm to keep: not even booted (saves a sandbox's worth of
		// work and memory at every start).
		return tpl.Hash, errNoWarmState
	}
	id := bootPrefix + tpl.Hash
	dir := m.snapshotDir(id)
	if e, warm, err := m.loadBoot(dir, id); err == nil {
		if !warm && !m.pooled(name) {
			return tpl.Hash, errNoWarmState
		}
		m.boot.set(tpl.Hash, e)
		return tpl.Hash, nil
	} else if errors.Is(err, errOtherAgent) {
		m.log.Info("boot snapshot on disk was made with another build of the agent; making a new one", "template", name)
	} else if errors.Is(err, errOtherRuntimeBuild) {
		m.log.Info("boot snapshot on disk was saved by another build of the runtime; making a new one", "template", name)
	} else if !errors.Is(err, os.ErrNotExist) {
		m.log.Warn("boot snapshot on disk is unusable; making a new one", "template", name, "err", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return tpl.Hash, fmt.Errorf("removing old boot snapshot: %w", err)
	}
	_ = os.Remove(dir + ".json")

	limits, err := m.resolveLimits(Limits{CPUCount: tpl.CPUCount, MemoryMB: tpl.MemoryMB})
	if err != nil {
		return tpl.Hash, err
	}
	sb, err := m.Create(ctx, CreateRequest{TemplateID: name, Timeout: 10 * time.Minute, Secure: true,
		Limits: limits, Metadata: map[string]string{internalKey: internalBoot}, hidden: true})
	if err != nil {
		return tpl.Hash, fmt.Errorf("booting the template: %w", err)
	}
	captured := false
	defer func() {
		if !captured {
			if err := m.Kill(context.WithoutCancel(ctx), sb.ID); err != nil && !IsNotFound(err) {
				m.log.Warn("killing boot sandbox", "sandbox", sb.ID, "err", err)
			}
		}
	}()
	warm, err := m.waitWarm(ctx, sb)
	if err != nil {
		return tpl.Hash, fmt.Errorf("waiting for the interpreter's warm contexts: %w", err)
	}
	e, err := m.Lookup(sb.ID)
	if err == nil {
		err = e.beginOp(ctx, opSnapshotting, false)
	}
	if err != nil {
		return tpl.Hash, err
	}
	captured = true // capture removes the sandbox
	sp, err := e.capture(ctx, cp, ls, id, dir, false)
	if err != nil {
		return tpl.Hash, fmt.Errorf("capturing the booted template: %w", err)
	}
	b, _ := json.Marshal(bootFile{Spec: sp, Limits: limits, Warm: &warm})
	if err := os.WriteFile(dir+".json", b, 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return tpl.Hash, fmt.Errorf("writing boot snapshot spec: %w", err)
	}
	if !warm && !m.pooled(name) {
		return tpl.Hash, errNoWarmState // kept on disk for a later --warm-pool
	}
	m.boot.set(tpl.Hash, &bootEntry{dir: dir, spec: sp, limits: limits})
	return tpl.Hash, nil
}

// loadBoot verifies a boot snapshot left by an earlier run.
func (m *Manager) loadBoot(dir, id string) (*bootEntry, bool, error) {
	b, err := os.ReadFile(dir + ".json")
	if err != nil {
		return nil, false, err
	}
	var bf bootFile
	if err := json.Unmarshal(b, &bf); err != nil {
		return nil, false, fmt.Errorf("parsing %s.json: %w", id, err)
	}
	if bf.Spec.Runtime != m.cfg.Runtime.Name() {
		return nil, false, fmt.Errorf("made with the %q runtime", bf.Spec.Runtime)
	}
	if bf.Warm == nil {
		return nil, false, errors.New("written by an older version")
	}
	if bf.Spec.AgentPath != m.cfg.AgentPath {
		return nil, false, errOtherAgent
	}
	if bf.Spec.RuntimeBuild != m.runtimeBuild() {
		return nil, false, errOtherRuntimeBuild
	}
	if err := verifyManifest(dir, id); err != nil {
		return nil, false, err
	}
	return &bootEntry{dir: dir, spec: bf.Spec, limits: bf.Limits}, *bf.Warm, nil
}

// interpreterMarkers are the paths whose presence in a root filesystem makes
// the agent start the code interpreter (cmd/airlock-envd, -interpreter=auto).
var interpreterMarkers = []string{"usr/lib/python3/dist-packages/ipykernel", "usr/local/lib/python3/dist-packages/ipykernel"}

// hasInterpreter reports whether sandboxes of the template rooted at rootfs
// run the code interpreter (and so have warm state worth a boot snapshot).
// An empty rootfs (unknown) counts as having one.
func hasInterpreter(rootfs string) bool {
	if rootfs == "" {
		return true
	}
	for _, p := range interpreterMarkers {
		if _, err := os.Stat(filepath.Join(rootfs, p)); err == nil {
			return true
		}
	}
	return false
}

// waitWarm waits until a code-interpreter sandbox's default Python context
// (kernel started, warm-up imports done) answers an execution; warm reports
// whether there is an interpreter. The JavaScript context is not touched:
// its node starts on its first use (internal/envd/interpreter), so the
// snapshot, and every sandbox restored from it, does not carry it.
func (m *Manager) waitWarm(ctx context.Context, sb *Sandbox) (warm bool, err error) {
	host := sb.GuestIP.String()
	if m.agent.InterpreterHealth(ctx, host) != nil {
		return false, nil // no interpreter in this template
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return true, m.executeOnce(wctx, host, sb.AccessToken, "python")
}

// executeOnce runs a trivial silent execution in the default context of
// lang (silent: it does not advance the execution count, so a user's first
// cell in a sandbox made from the snapshot is number 1) and checks that it
// ended without an error.
func (m *Manager) executeOnce(ctx context.Context, host, token, lang string) error {
	status, out, err := m.agent.Execute(ctx, host, token, guest.ExecuteRequest{Code: "1", Language: lang, Silent: true})
	if err != nil {
		return fmt.Errorf("%s execution: %w", lang, err)
	}
	if status != http.StatusOK || !strings.Contains(string(out), `"end_of_execution"`) ||
		strings.Contains(string(out), `"type":"error"`) {
		return fmt.Errorf("%s execution: status %d: %.200s", lang, status, out)
	}
	return nil
}
