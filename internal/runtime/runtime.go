// Package runtime defines the isolation runtime interface that every sandbox
// backend (gVisor, microVM) implements. The sandbox manager only talks to this
// interface; kernel-facing details live in the sub-packages.
package runtime

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"time"
)

// ErrNotFound is returned when the runtime knows nothing about a sandbox id.
var ErrNotFound = errors.New("runtime: sandbox not found")

// Resources are the limits applied to one sandbox.
type Resources struct {
	CPUCount int // whole CPUs (quota); 0 = runtime default
	MemoryMB int // memory limit; 0 = runtime default
	PIDs     int // max processes/threads; 0 = runtime default
	DiskMB   int // size of the writable layer (best effort for overlay); 0 = default
	// OpenFiles is RLIMIT_NOFILE of the sandbox's processes; 0 = runtime default.
	OpenFiles int
}

// Spec describes one sandbox to start.
type Spec struct {
	ID string // sandbox id, [a-z0-9]+
	// RootFS is the read-only template root filesystem directory (never written).
	RootFS string
	// Dir is a private per-sandbox state directory owned by the runtime
	// (overlay upper/work dirs, bundle, logs). Deleted by Destroy.
	Dir string
	// NetNSPath is the network namespace the sandbox joins
	// (e.g. /var/run/netns/airlock-<id>), already configured by internal/network.
	NetNSPath string
	// GuestAddr is the sandbox's address in that namespace, where the host
	// reaches its agent (zero: unknown). gVisor wakes the agent there with a
	// datagram (internal/guest.Wake) before falling back to `runsc kill`.
	GuestAddr netip.Addr
	// AgentPath is the host path of the static airlock-envd binary; the runtime
	// makes it available inside the sandbox at AgentGuestPath and runs it as
	// the sandbox's init/agent (as root).
	AgentPath string
	// Hostname inside the sandbox.
	Hostname string
	// Nameservers written to /etc/resolv.conf inside the sandbox.
	Nameservers []string
	// Hosts are extra /etc/hosts lines ("ip name").
	Hosts []string
	// Env for the agent process.
	Env       []string
	Resources Resources
	// Mounts are host directories mounted into the sandbox (volumes),
	// shared: writes through one sandbox's mount are seen at once by
	// every other sandbox and the host.
	Mounts []Mount
}

// Mount is a host directory mounted into a sandbox.
type Mount struct {
	// Source is the host directory (a volume's Backing.Dir).
	Source string
	// Destination is the absolute path in the sandbox.
	Destination string
	ReadOnly    bool
}

// AgentGuestPath is where the agent binary appears inside every sandbox.
const AgentGuestPath = "/usr/local/bin/airlock-envd"

// State of a sandbox as the runtime sees it.
type State string

const (
	StateRunning State = "running"
	StatePaused  State = "paused"
	StateStopped State = "stopped"
)

// Stats is a point-in-time resource reading.
type Stats struct {
	Time        time.Time
	CPUUsageNs  uint64 // cumulative CPU time
	MemoryUsed  uint64 // bytes
	MemoryCache uint64 // bytes
	MemoryLimit uint64 // bytes
	DiskUsed    uint64 // bytes in the writable layer
	DiskLimit   uint64 // bytes
	PIDs        uint64
}

// Runtime is an isolation backend. Implementations must be safe for
// concurrent use on different ids.
type Runtime interface {
	// Name is the runtime's identifier ("gvisor", "microvm", "unsafe").
	Name() string
	// Start creates and starts a sandbox from spec and returns once the agent
	// process has been started (not necessarily listening yet).
	Start(ctx context.Context, spec Spec) error
	// Destroy stops the sandbox (if running) and releases everything the
	// runtime created for it: processes, mounts, cgroups and spec.Dir.
	// Destroying an unknown id is not an error.
	Destroy(ctx context.Context, id, dir string) error
	// State reports the sandbox's state, or ErrNotFound.
	State(ctx context.Context, id string) (State, error)
	// Stats reads resource usage.
	Stats(ctx context.Context, id, dir string) (Stats, error)
	// List returns the ids of all sandboxes this runtime currently holds
	// (used after a daemon restart to re-attach or clean up).
	List(ctx context.Context) ([]string, error)
	// Caps returns the runtime's optional abilities (pause, fork,
	// snapshots…): the one way callers discover them.
	Caps() Caps
}

// Checkpointer is implemented by runtimes that can save a running sandbox
// (memory and processes) and start it again later from that image. Callers
// find it in Caps; runtimes without it cannot pause or fork.
type Checkpointer interface {
	// Checkpoint saves the sandbox's memory and process state to imageDir
	// and stops it. Everything else in dir (writable layer, mounts, bundle)
	// is kept for Restore. On error the sandbox may be stopped.
	Checkpoint(ctx context.Context, id, dir, imageDir string) error
	// Restore starts spec.ID again from imageDir in the existing spec.Dir
	// (as left by Checkpoint) and returns once runsc reports it running.
	// Only spec.ID, spec.Dir, spec.NetNSPath and spec.GuestAddr are used.
	Restore(ctx context.Context, spec Spec, imageDir string) error
	// Signal sends sig to the sandbox's init process (the agent). SIGUSR1
	// (listen again after a restore) and SIGUSR2 (wake the OOM guard) may
	// be delivered another way (gVisor: a datagram to the agent's wake
	// port; microVM: an HTTP request), and return once the agent acted.
	Signal(ctx context.Context, id string, sig syscall.Signal) error
}

// GuestAddrKeeper is implemented by runtimes that wake a sandbox's agent at
// its address (gVisor: a datagram to the agent's wake port). They learn it
// from Spec.GuestAddr; a restarted daemon tells them the address of each
// running sandbox it re-attaches.
type GuestAddrKeeper interface {
	KeepGuestAddr(id string, addr netip.Addr)
}

// Cloner is implemented by checkpointing runtimes that can start copies of
// a checkpointed sandbox (fork).
type Cloner interface {
	// Clone prepares spec.Dir from the stopped, checkpointed sandbox in
	// parentDir: a copy of its writable layer plus a bundle for spec
	// (which must use the same template and resources as the parent).
	// Restore(spec, image) then starts the copy.
	Clone(ctx context.Context, parentDir string, spec Spec) error
}

// StateLister is implemented by runtimes that can report the state of all
// their sandboxes in one call (cheaper than State for each).
type StateLister interface {
	States(ctx context.Context) (map[string]State, error)
}

// AgentLogger is implemented by runtimes that keep the agent's own log
// output (JSON lines on its stderr) in a host file; the sandbox logs merge
// its process start/exit events.
type AgentLogger interface {
	// AgentLog is the host path of the log of the sandbox whose runtime
	// directory is dir.
	AgentLog(dir string) string
}

// Rebooter is implemented by runtimes that can stop a sandbox while keeping
// its disk, and boot it again from that disk: a filesystem-only pause,
// cheaper to keep than a checkpoint (no memory image); its resume is a
// fresh boot (new processes, a new boot_id).
type Rebooter interface {
	// Shutdown stops every process of the sandbox and frees its memory;
	// its writable disk, network hand-over and everything Boot needs stay
	// in dir. The caller has the guest sync its file systems first.
	Shutdown(ctx context.Context, id, dir string) error
	// Boot starts the sandbox kept by Shutdown again (spec.ID, Dir and
	// NetNSPath are used) and returns once its agent process runs.
	Boot(ctx context.Context, spec Spec) error
}

// StopReasoner is implemented by runtimes that can tell why a sandbox
// stopped on its own. StopReason must be called before Destroy; it returns a
// short phrase ("it exceeded its memory limit") or "" when unknown.
type StopReasoner interface {
	StopReason(id string) string
}

// ImageBuilder is implemented by runtimes whose memory images are only meant
// to be restored by the same build of the runtime (gVisor's checkpoint
// format is internal to one runsc). ImageBuild names that build; saved
// snapshots record it, and boot snapshots of another build are made again.
type ImageBuilder interface {
	ImageBuild() string
}

// LayerSaver is implemented by cloning runtimes that can keep a copy of a
// checkpointed sandbox's writable layer outside the sandbox (named
// snapshots) and start sandboxes from such a copy later.
type LayerSaver interface {
	// SaveLayer copies the writable layer of the stopped, checkpointed
	// sandbox in dir into the existing directory dst (regular files and
	// directories only; dst must not be inside dir).
	SaveLayer(ctx context.Context, dir, dst string) error
	// CloneSaved prepares spec.Dir from a layer saved by SaveLayer in src,
	// like Cloner.Clone does from a checkpointed sandbox. src is not
	// modified.
	CloneSaved(ctx context.Context, src string, spec Spec) error
}

// LayerTaker is implemented by LayerSavers that can take a saved layer's
// files instead of copying them: a paused image fetched from the artifact
// store is used once (issue 24: a resume on another node).
type LayerTaker interface {
	// TakeSaved is CloneSaved, except that src's files may be moved into
	// spec.Dir (src is the caller's to remove afterwards).
	TakeSaved(ctx context.Context, src string, spec Spec) error
}

// CheckpointWatcher is implemented by runtimes that can tell whether a
// checkpoint of a sandbox is still being written, or a restore from one is
// still running (by a process that outlived the daemon that started it).
type CheckpointWatcher interface {
	CheckpointInProgress(id string) bool
}

// Caps are a runtime's optional abilities, as its Caps method states them:
// each field is the runtime itself when it has that ability, else nil
// (EgressSteering: true when it has it).
type Caps struct {
	// EgressSteering: every packet of a guest leaves through the sandbox's
	// host veth and its network namespace's conntrack (gVisor's netstack;
	// a microVM's TAP redirected into eth0), where internal/network steers
	// the ruled domains' connections to the node's egress proxy. Without
	// it a create or network update with network.rules is refused (issue
	// 29): rules are never kept where nothing enforces them.
	EgressSteering    bool
	Checkpointer      Checkpointer
	Cloner            Cloner
	LayerSaver        LayerSaver
	StateLister       StateLister
	AgentLogger       AgentLogger
	Rebooter          Rebooter
	StopReasoner      StopReasoner
	ImageBuilder      ImageBuilder
	CheckpointWatcher CheckpointWatcher
	Stopper           Stopper
}

// Stopper is implemented by runtimes that can stop every process of a
// sandbox at once, before (and much faster than) Destroy: a kill answers
// once every process of the sandbox has been sent SIGKILL (a SIGKILLed
// process never runs user code again) and leaves the wait for their exit,
// and the rest of Destroy, for later.
type Stopper interface {
	// Stop sends SIGKILL to every process of the sandbox (its agent and
	// everything it started, the VMM or Sentry included) and returns once
	// each has been sent it; they may still be exiting. Its runtime state,
	// mounts, cgroups and dir stay for WaitStopped and Destroy. Stopping an
	// unknown id is not an error.
	Stop(ctx context.Context, id, dir string) error
	// WaitStopped returns once no process of the sandbox is left, sending
	// SIGKILL to any it still finds (a sandbox that Stop never reached:
	// a daemon killed before it). It must return before anything that
	// needs the processes gone (unmounting the root filesystem, removing
	// the cgroups, reusing the sandbox's address). An unknown id is not an
	// error.
	WaitStopped(ctx context.Context, id, dir string) error
}
