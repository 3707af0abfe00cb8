package cluster

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// Roles of `airlock serve --role`.
const (
	RoleAll  = "all"  // one host: API, proxy and sandboxes (the default)
	RoleAPI  = "api"  // stateless api tier
	RoleNode = "node" // runs sandboxes for the api tier
)

// Headers of the api → node hop.
const (
	// HeaderSecret carries the cluster secret on every request the api tier
	// sends a node, inside the mutually authenticated TLS connection
	// (clustertls): a second factor besides the api tier's certificate. A
	// node refuses any request without both (GET /health excepted); the api
	// tier removes the header from what clients send.
	HeaderSecret = "X-Airlock-Cluster-Secret"
	// HeaderAuthenticated is set by the api tier on a request whose API key
	// it checked (its value says how: "api-key"), and removed from every
	// other request. A node serves its API only for requests that carry it
	// (or that it authenticates itself, e.g. a signed upload URL).
	HeaderAuthenticated = "X-Airlock-Authenticated"
	// HeaderNode names the node that served a request: set by a node on
	// its responses and passed on by the api tier.
	HeaderNode = "X-Airlock-Node"
	// HeaderGen is set by a node on a create's response: the generation of
	// the first heartbeat that counts the new sandbox
	// (placement.Reservation.Confirm).
	HeaderGen = "X-Airlock-Node-Gen"
	// HeaderInternal marks the api tier's own calls to a node's internal
	// API (InternalPrefix); the api tier removes it from every request it
	// forwards, and a node serves that API only to requests carrying it and
	// the secret.
	HeaderInternal = "X-Airlock-Internal"
)

// InternalPrefix starts the paths of the node API only the api tier
// itself calls (never a client's request: the api tier refuses them):
//
//	POST InternalPrefix+"sandboxes/{id}/adopt"  AdoptRequest → SandboxMoved
//	POST InternalPrefix+"sandboxes/{id}/drop"   → 204 (the old node of a moved sandbox lets it go now)
//	POST InternalPrefix+"evacuate"              → EvacuateResponse
const InternalPrefix = "/airlock/v1/internal/"

// AdoptRequest asks a node to take the paused sandbox whose row is on node
// From (its image is in the artifact store), and with Resume to resume it
// (TimeoutMs: its timeout; 0 keeps what an evacuated sandbox had left, or
// 5 minutes).
type AdoptRequest struct {
	From      string `json:"from"`
	Resume    bool   `json:"resume,omitempty"`
	TimeoutMs int64  `json:"timeoutMs,omitempty"`
}

// SandboxMoved is one sandbox a drain or a move handled (the SDK's wire
// type).
type SandboxMoved = airlock.SandboxMove

// EvacuateResponse is a node's answer to evacuate: every sandbox it held,
// paused into the artifact store (State "paused") or with an Error.
type EvacuateResponse struct {
	Sandboxes []SandboxMoved `json:"sandboxes"`
}

// DrainResponse is the api tier's answer to a drain (the SDK's wire type).
type DrainResponse = airlock.NodeDrain

// Node states, as stored in the nodes table.
const (
	StateLive     = "live"
	StateDraining = "draining" // set by `airlock node drain`: no new sandboxes
	StateLost     = "lost"     // no heartbeat for LostAfter: set by the reaper
)

// Time bounds.
const (
	// HeartbeatInterval is how often a node writes its heartbeat.
	HeartbeatInterval = 2 * time.Second
	// LostAfter is how long a node may go without a heartbeat before it
	// is marked lost (by the server's clock).
	LostAfter = 15 * time.Second
	// ReapInterval is how often the api tier looks for lost nodes.
	ReapInterval = 2 * time.Second
)

// ErrNotFound is returned when a route (sandbox, snapshot, build, node) is
// not in the store.
var ErrNotFound = errors.New("cluster: not found")

// Node is one row of the nodes table: a node's registration and its last
// heartbeat.
type Node struct {
	ID      string
	Addr    string // host:port the api tier dials (--advertise-addr)
	State   string // StateLive, StateDraining or StateLost
	Runtime string // "gvisor" or "microvm"
	Labels  []string
	Version string // the node's build

	// Gen numbers the node's heartbeats from 1 (placement.Node.Gen).
	Gen uint64
	// Capacity the node states, and what its sandboxes hold.
	CPUs, MemoryMB, DiskMB, MaxSandboxes      int
	ReservedCPUs, ReservedMemoryMB, Sandboxes int
	// Templates the node holds on disk (names, "name:tag" for tags), and
	// ready warm-pool sandboxes per template.
	Templates []string
	WarmPool  map[string]int

	StartedAt   time.Time
	HeartbeatAt time.Time
	// Age is how long ago the last heartbeat was, by the database's clock
	// (filled by Nodes; never written).
	Age time.Duration
	// LostAt is when the node was marked lost (zero otherwise).
	LostAt time.Time
}

// Lost is what is known of a sandbox that went away with its node.
type Lost struct {
	SandboxID string
	NodeID    string
	At        time.Time
	Reason    string // e.g. "node n2 was lost: no heartbeat for 15s"
}

// RouteChange is a notification that a sandbox's route changed (it was
// killed, lost or moved): route caches drop the entry. Resync means
// notifications may have been missed: drop every entry.
type RouteChange struct {
	SandboxID string
	Resync    bool
}

// Store is the cluster's own state in the shared database. Every time it
// compares is the database server's clock.
type Store interface {
	// Heartbeat upserts the node's row (registration on first call) and
	// returns the state now stored: a drain or loss set by someone else
	// stays until SetNodeState changes it.
	Heartbeat(ctx context.Context, n Node) (state string, err error)
	// Touch refreshes a registered node's heartbeat time and nothing else
	// (a restarting node, before its first full heartbeat); a lost node
	// stays lost, an unknown id is ignored.
	Touch(ctx context.Context, id string) error
	// SetNodeState sets a node's state (drain, undrain, back to live after
	// a node reconciled a loss). ErrNotFound for an unknown node.
	SetNodeState(ctx context.Context, id, state string) error
	// Nodes lists every registered node, with Age filled.
	Nodes(ctx context.Context) ([]Node, error)
	// RemoveNode deletes a node's row (a node that left for good).
	RemoveNode(ctx context.Context, id string) error

	// SandboxNode is the node that owns a sandbox (running or paused).
	SandboxNode(ctx context.Context, sandboxID string) (string, error)
	// SandboxRoute is SandboxNode with what the api tier needs to move a
	// paused sandbox to another node.
	SandboxRoute(ctx context.Context, sandboxID string) (Route, error)
	// SnapshotNode is the node holding a named snapshot, by id or name.
	SnapshotNode(ctx context.Context, idOrName string) (string, error)
	// BuildNode is the node running (or that ran) a template build.
	BuildNode(ctx context.Context, buildID string) (string, error)
	// TemplateBuildNode is the node of a template's newest build.
	TemplateBuildNode(ctx context.Context, templateID string) (string, error)
	// SandboxTokens lists the id, node and envd access token of every
	// sandbox that has a token (to route a header-less signed /files URL;
	// the api tier reads it at most once a second: gateway.tokenIndex).
	SandboxTokens(ctx context.Context) ([]SandboxToken, error)

	// ReapLostNodes marks nodes whose heartbeat is older than bound as
	// lost, removes their running sandboxes' rows (paused ones stay: their
	// images are on the node's disk) recording each as Lost, and returns
	// the nodes it marked. Run by one api instance at a time (an advisory
	// lock): the others get nil, nil.
	ReapLostNodes(ctx context.Context, bound time.Duration) ([]Node, error)
	// LostSandbox is the record of a sandbox removed by ReapLostNodes.
	LostSandbox(ctx context.Context, sandboxID string) (Lost, error)

	// WatchRoutes delivers a RouteChange whenever a node deletes a
	// sandbox's row (kill, timeout, loss); the channel closes when ctx
	// ends.
	WatchRoutes(ctx context.Context) (<-chan RouteChange, error)
}

// Route is where a sandbox is and whether another node can take it.
type Route struct {
	NodeID string
	State  string // "running", "paused", or a transition ("resuming")
	// Movable: paused, with its image in the artifact store, so any node
	// can resume it (a move: the node claims the row, then pulls).
	Movable bool
	// Evacuated: paused by a drain or its node's stop rather than by its
	// user: the next request for it resumes it wherever it lands.
	Evacuated  bool
	AutoResume bool
	// Uploading: paused, its checkpoint durable on its node, its image not
	// yet in the artifact store (the upload follows the pause's answer):
	// only its node can resume it until the upload is done.
	Uploading bool
	// What a node taking it needs (placement): the template under it (the
	// base template of a sandbox made from a snapshot), its CPUs, memory.
	TemplateID         string
	CPUCount, MemoryMB int
	// Volumes: it mounts volumes, so only a node with the shared volume
	// root (LabelVolumes) can take it.
	Volumes bool
}

// SandboxToken is a sandbox's route and envd access token.
type SandboxToken struct {
	SandboxID, NodeID, AccessToken string
}

// ReadSecret reads the cluster secret from path (--cluster-secret-file),
// else from $AIRLOCK_CLUSTER_SECRET. It refuses one shorter than 16 bytes.
func ReadSecret(path string) (string, error) {
	var s string
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("reading --cluster-secret-file: %w", err)
		}
		s = strings.TrimSpace(string(b))
	} else {
		s = strings.TrimSpace(os.Getenv("AIRLOCK_CLUSTER_SECRET"))
	}
	if s == "" {
		return "", errors.New("the api and node roles need a cluster secret: --cluster-secret-file or $AIRLOCK_CLUSTER_SECRET")
	}
	if len(s) < 16 {
		return "", errors.New("the cluster secret is too short: want at least 16 characters")
	}
	return s, nil
}

// SecretValid reports, in constant time, whether got is the secret.
func SecretValid(secret, got string) bool {
	return secret != "" && subtle.ConstantTimeCompare([]byte(secret), []byte(got)) == 1
}
