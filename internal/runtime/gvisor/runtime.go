//go:build linux

package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/helperenv"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// ErrInvalidSpec marks errors caused by a bad runtime.Spec (a caller error,
// not a runtime failure); it is runtime.ErrInvalidSpec too.
var ErrInvalidSpec = runtime.InvalidSpec("gvisor")

// Config configures the gVisor runtime.
type Config struct {
	// RunscPath is the runsc binary; default: DefaultRunscPath(), the
	// pinned build of scripts/build-runsc.sh.
	RunscPath string
	// Root is runsc's --root state directory (e.g. <data>/runsc). Required.
	Root string
	// Platform is runsc's --platform; default "systrap" (see
	// ChoosePlatform for the daemon's probe and ptrace fallback).
	Platform string
	// ExtraFlags are extra global runsc flags (e.g. "--ignore-cgroups" on
	// hosts where runsc cannot manage cgroups).
	ExtraFlags []string
	// DiskMB is the default size of a sandbox's writable layer when
	// Resources.DiskMB is 0; 0 means DefaultDiskMB, negative means no
	// size limit (plain directory layer).
	DiskMB int
	// MkfsPath is the mkfs.ext4 binary; default: looked up in PATH, then
	// /usr/sbin and /sbin.
	MkfsPath string
	// DebugLogDir, when set, makes runsc write debug logs for each sandbox
	// to DebugLogDir/<id>/ (kept after Destroy).
	DebugLogDir string
	// CgroupParent is the cgroup (under each controller's root) that holds
	// the sandboxes' cgroups, /<CgroupParent>/<id>; default "airlock". Two
	// daemons on one host need different ones once a sandbox can move
	// between them under its id (cluster nodes on one machine): the one
	// that lets it go would remove the other's cgroup.
	CgroupParent string
	// PodInitConfig, when set, is runsc's --pod-init-config for every
	// sandbox start and restore: the activity feed's trace session
	// (internal/activity, trace.go).
	PodInitConfig string
}

// Runtime is the gVisor implementation of runtime.Runtime. Apart from
// background deletes after a checkpoint it keeps no per-sandbox state in
// memory; everything lives in runsc's root directory and the sandbox
// directories, so it is safe for concurrent use.
type Runtime struct {
	runsc string
	root  string
	// cgroupParent is Config.CgroupParent.
	cgroupParent string
	platform     string
	extra        []string
	diskMB       int
	mkfsPath     string
	debugDir     string
	podInit      string
	log          *slog.Logger

	// buildOnce guards build, the ImageBuild identity (hashed lazily).
	buildOnce sync.Once
	build     string

	// mu guards deleting: background deletes of checkpointed containers
	// (checkpoint.go), by id; and watches, the memory watchers of running
	// sandboxes (memwatch.go), by id.
	mu       sync.Mutex
	deleting map[string]chan struct{}
	watches  map[string]*memWatch

	// memo holds the last `runsc events` sample of each sandbox
	// (stats_memo.go).
	memo statsMemos

	// groups: the sandboxes started in their kill group (killgroup_linux.go).
	groups killGroups

	// addrs and wakes: where the agents are woken, and how (wake.go).
	addrs guestAddrs
	wakes wakeCounts
}

var _ runtime.Runtime = (*Runtime)(nil)

// New checks cfg and returns a Runtime.
func New(cfg Config, log *slog.Logger) (*Runtime, error) {
	if log == nil {
		log = slog.Default()
	}
	if cfg.Root == "" {
		return nil, errors.New("gvisor: Config.Root is required")
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("resolving runsc root: %w", err)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("creating runsc root: %w", err)
	}
	runsc := cfg.RunscPath
	if runsc == "" {
		runsc = DefaultRunscPath()
		if _, err := os.Stat(runsc); err != nil {
			return nil, fmt.Errorf("finding runsc %s (build it with scripts/build-runsc.sh): %w", PinnedVersion(), err)
		}
	}
	if runsc, err = exec.LookPath(runsc); err != nil {
		return nil, fmt.Errorf("finding runsc: %w", err)
	}
	platform := cfg.Platform
	if platform == "" {
		platform = PlatformSystrap
	}
	r := &Runtime{
		runsc:    runsc,
		root:     root,
		platform: platform,
		extra:    append([]string(nil), cfg.ExtraFlags...),
		diskMB:   cfg.DiskMB,
		debugDir: cfg.DebugLogDir,
		podInit:  cfg.PodInitConfig,
		log:      log.With("runtime", "gvisor"),
	}
	if r.diskMB == 0 {
		r.diskMB = DefaultDiskMB
	}
	r.cgroupParent = cfg.CgroupParent
	if r.cgroupParent == "" {
		r.cgroupParent = "airlock"
	}
	if r.diskMB > 0 {
		if r.mkfsPath, err = findMkfs(cfg.MkfsPath); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func findMkfs(p string) (string, error) {
	if p != "" {
		return exec.LookPath(p)
	}
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p, nil
	}
	for _, c := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if _, err := os.Stat(c); err == nil {
			return c, nil
		}
	}
	return "", errors.New("gvisor: mkfs.ext4 not found (install e2fsprogs or set Config.DiskMB < 0)")
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return "gvisor" }

// Close releases what runsc keeps in Root between sandboxes: the bind mount
// that pins its shared empty network namespace for gofers
// (<root>/null-netns, `--gofer-network-namespace=null`, runsc's default
// since 2025). Running gofers hold the namespace themselves, so this is safe
// with sandboxes alive; the next sandbox pins a new one. Without it the
// runsc root (and a data dir on its own mount) cannot be removed: EBUSY.
func (r *Runtime) Close() error {
	p := filepath.Join(r.root, "null-netns")
	// Concurrent runsc invocations may stack mounts there; unmount all.
	for i := 0; i < 64 && syscall.Unmount(p, syscall.MNT_DETACH) == nil; i++ {
	}
	return nil
}

// Platform is the runsc platform sandboxes run on.
func (r *Runtime) Platform() string { return r.platform }

// globalArgs are the runsc flags of every invocation. --overlay2=none: since
// 2023 runsc wraps the root filesystem in its own overlay by default
// (root:self, the upper layer in a file inside the sandbox's memory
// accounting), so writes would never reach the writable layer on disk.img
// that disk limits, template builds and snapshots rely on.
func (r *Runtime) globalArgs() []string {
	args := []string{"--root", r.root, "--platform", r.platform, "--network", "sandbox", "--overlay2", "none"}
	return append(args, r.extra...)
}

// runscError is a failed runsc invocation.
type runscError struct {
	args   []string
	err    error
	stderr string
}

func (e *runscError) Error() string {
	return fmt.Sprintf("runsc %s: %v: %s", strings.Join(e.args, " "), e.err, e.stderr)
}

func (e *runscError) Unwrap() error { return e.err }

// notFound reports whether err is runsc saying the container does not exist.
func notFound(err error) bool {
	var re *runscError
	return errors.As(err, &re) && strings.Contains(re.stderr, "does not exist")
}

// exec runs a short-lived runsc subcommand and returns its stdout.
func (r *Runtime) exec(ctx context.Context, args ...string) ([]byte, error) {
	full := append(r.globalArgs(), args...)
	cmd := helperenv.Command(ctx, r.runsc, full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	// Never wait forever for pipes a stray child might have inherited.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), &runscError{args: args, err: err, stderr: strings.TrimSpace(stderr.String())}
	}
	return stdout.Bytes(), nil
}

func validate(spec runtime.Spec) error {
	if err := spec.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	return nil
}

// Start implements runtime.Runtime: it builds the overlay root filesystem
// and the OCI bundle in spec.Dir and runs the container detached. It returns
// once runsc reports the container started. On failure everything created
// so far is torn down again.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) (err error) {
	if err := validate(spec); err != nil {
		return err
	}
	dir := filepath.Clean(spec.Dir)
	if r.known(spec.ID) {
		return fmt.Errorf("%w: sandbox %s already exists in runsc", ErrInvalidSpec, spec.ID)
	}
	if err := runtime.MakeSandboxDir(dir, ErrInvalidSpec); err != nil {
		return err
	}
	started := time.Now()
	var undo runtime.Cleanup
	defer undo.Unwind(ctx, &err)
	undo.Push(r.destroyStep("start", spec.ID, dir))
	undo.Push(func(context.Context) {
		if tail := runtime.LogTail(AgentLogPath(dir), 2048); tail != "" && !strings.Contains(err.Error(), "agent.log:") {
			err = fmt.Errorf("%w\nagent.log: %s", err, tail)
		}
	})

	l := effectiveLimits(spec.Resources, r.diskMB)
	if err := r.prepareLayer(ctx, dir, max(l.diskMB, 0)); err != nil {
		return err
	}
	if err := mountOverlay(filepath.Clean(spec.RootFS), dir); err != nil {
		return err
	}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.ID
	}
	if err := writeGuestFiles(RootfsDir(dir), spec, hostname); err != nil {
		return err
	}
	if err := writeBundle(dir, buildSpec(spec, RootfsDir(dir), l, r.cgroupsPath(spec.ID))); err != nil {
		return err
	}
	layerReady := time.Since(started)

	if err := r.runDetached(ctx, spec.ID, dir, "run", "--detach", "--bundle", dir, spec.ID); err != nil {
		return err
	}
	r.addrs.set(spec.ID, spec.GuestAddr)
	if err := r.raiseHostMemory(spec.ID, dir); err != nil {
		return err
	}
	r.log.Debug("sandbox started", "id", spec.ID, "layer", layerReady, "total", time.Since(started))
	return nil
}

// destroyStep is the Cleanup step that removes what a failed start or
// clone (what) of sandbox id made.
func (r *Runtime) destroyStep(what, id, dir string) func(context.Context) {
	return func(ctx context.Context) {
		if err := r.Destroy(ctx, id, dir); err != nil {
			r.log.Error("cleaning up failed "+what, "id", id, "err", err)
		}
	}
}

// checkNetNS verifies that path is a network namespace other than the one
// of the host (pid 1) and of this process.
func checkNetNS(path string) error {
	if err := runtime.CheckNetNS(path); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	return nil
}

// known reports whether runsc has state for container id (runsc keeps it in
// <root>/<container>_sandbox:<sandbox>.state).
func (r *Runtime) known(id string) bool {
	_, err := os.Stat(filepath.Join(r.root, id+"_sandbox:"+id+".state"))
	return err == nil
}

// Destroy implements runtime.Runtime: kills and deletes the container,
// unmounts the overlay and the layer image, removes leftover cgroups and
// deletes dir. Unknown ids are not an error; a call that fails can be
// retried.
func (r *Runtime) Destroy(ctx context.Context, id, dir string) error {
	if err := runtime.CheckID(ErrInvalidSpec, id); err != nil {
		return err
	}
	var errs []error
	if err := r.waitDeleted(ctx, id); err != nil {
		return err
	}
	if dir != "" && filepath.IsAbs(dir) {
		// A frozen layer (daemon killed mid-copy) would block the sandbox's
		// exit and the unmount below.
		if _, err := thawLayer(filepath.Clean(dir)); err != nil {
			errs = append(errs, err)
		}
	}
	r.unwatchMemory(id)
	r.addrs.forget(id)
	t0 := time.Now()
	if _, err := r.exec(ctx, "kill", id, "KILL"); err != nil && !notFound(err) {
		// Usually "not running" for a stopped container; delete --force
		// below is what matters.
		r.log.Debug("runsc kill", "id", id, "err", err)
	}
	if _, err := r.exec(ctx, "delete", "--force", id); err != nil && !notFound(err) {
		errs = append(errs, err)
	}
	r.log.Debug("runsc kill+delete", "id", id, "took", time.Since(t0))
	r.removeCgroups(id)
	r.forgetKillGroup(id)
	if dir != "" {
		dir = filepath.Clean(dir)
		if !filepath.IsAbs(dir) || dir == "/" {
			return fmt.Errorf("%w: Dir %q must be an absolute path", ErrInvalidSpec, dir)
		}
		if err := unmountAll(dir); err != nil {
			// Never RemoveAll through a live mount.
			errs = append(errs, err)
		} else if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("removing sandbox dir: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroying sandbox %s: %w", id, err)
	}
	return nil
}

// runscState is the subset of runsc's state JSON we use.
type runscState struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Pid    int    `json:"pid"`
	Bundle string `json:"bundle"`
}

// State implements runtime.Runtime; a running sandbox without a memory
// watcher gets one (memwatch.go).
func (r *Runtime) State(ctx context.Context, id string) (runtime.State, error) {
	if err := runtime.CheckID(ErrInvalidSpec, id); err != nil {
		return "", err
	}
	out, err := r.exec(ctx, "state", id)
	if err != nil {
		if notFound(err) {
			return "", runtime.ErrNotFound
		}
		return "", err
	}
	var st runscState
	if err := json.Unmarshal(out, &st); err != nil {
		return "", fmt.Errorf("parsing runsc state: %w", err)
	}
	switch st.Status {
	case "running":
		r.ensureWatched(id)
		return runtime.StateRunning, nil
	case "paused":
		return runtime.StatePaused, nil
	default: // "created", "stopped"
		return runtime.StateStopped, nil
	}
}

// Caps implements runtime.Runtime: gVisor checkpoints, clones, saves
// layers, lists states in one call, keeps the agent's log, reboots from the
// disk, says why a sandbox stopped, names its image build and watches
// checkpoints left by a previous daemon.
func (r *Runtime) Caps() runtime.Caps {
	return runtime.Caps{Checkpointer: r, Cloner: r, LayerSaver: r, StateLister: r, AgentLogger: r,
		Rebooter: r, StopReasoner: r, ImageBuilder: r, CheckpointWatcher: r, Stopper: r, EgressSteering: true}
}

// List implements runtime.Runtime.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	states, err := r.States(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(states))
	for id := range states {
		ids = append(ids, id)
	}
	return ids, nil
}
