package store

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned for unknown rows.
var ErrNotFound = errors.New("store: not found")

// ErrLeaseLost is returned (wrapped, with the new holder) by a store whose
// daemon lease another daemon took: the store refuses every operation
// after that, and the daemon shuts down. Only stores shared over the
// network hold a lease (PostgreSQL); see docs/ARCHITECTURE.md, "Store".
var ErrLeaseLost = errors.New("store: daemon lease lost")

// Sandbox is the persisted record of one sandbox.
type Sandbox struct {
	ID            string
	TemplateID    string // template name/alias as requested (e.g. "base")
	TemplateHash  string // content hash of the template build used
	Alias         string
	State         string // "running" | "paused"
	Runtime       string // runtime name
	Slot          int    // network slot
	GuestIP       string // agent address
	AccessToken   string // envdAccessToken
	TrafficToken  string // trafficAccessToken ("" when public)
	Metadata      map[string]string
	EnvVars       map[string]string
	AllowInternet bool
	CPUCount      int
	MemoryMB      int
	DiskSizeMB    int
	StartedAt     time.Time
	EndAt         time.Time // when the timeout fires
	OnTimeout     string    // "kill" | "pause"
	Extra         string    // JSON blob for runtime/feature specific fields
}

// Template is one built template (root filesystem).
type Template struct {
	Name      string // alias, e.g. "base"
	Hash      string // content hash; rootfs lives under <data>/templates/<hash>
	Runtime   string // "" = any
	SizeBytes int64
	CreatedAt time.Time
	Spec      string // JSON description of how it was built
	// ArtifactDigest is the digest of the template's manifest in the
	// artifact store (templates/<hash>) as the host that recorded it wrote
	// it: another host pulls the template only when the store's copy has
	// it. "" when there is no artifact store (or in rows from before it was
	// kept: such a template is not pulled).
	ArtifactDigest string
}

// Store is the persistence interface.
type Store interface {
	PutSandbox(ctx context.Context, s *Sandbox) error // insert or replace
	GetSandbox(ctx context.Context, id string) (*Sandbox, error)
	ListSandboxes(ctx context.Context) ([]*Sandbox, error)
	DeleteSandbox(ctx context.Context, id string) error

	PutTemplate(ctx context.Context, t *Template) error
	GetTemplate(ctx context.Context, name string) (*Template, error)
	ListTemplates(ctx context.Context) ([]*Template, error)
	DeleteTemplate(ctx context.Context, name string) error

	// Settings is a small key/value table (API key, schema version …).
	GetSetting(ctx context.Context, key string) (string, error)
	PutSetting(ctx context.Context, key, value string) error
	// InitSetting stores value under key unless the key has one, and
	// returns the value stored: of daemons starting at once on one
	// database, the first writer's value is every daemon's.
	InitSetting(ctx context.Context, key, value string) (string, error)

	Close() error
}

// Snapshot is a named snapshot of a sandbox (memory image + writable layer
// under <data>/snapshots/<id>/).
type Snapshot struct {
	ID        string
	Name      string // optional unique name ("" = none)
	SandboxID string // the sandbox it was taken from
	SizeBytes int64  // bytes used on disk
	CreatedAt time.Time
	Spec      string // JSON owned by the sandbox manager (template, resources, env, …)
}

// SnapshotStore is implemented by stores that persist named snapshots.
// It is separate from Store so that stores without snapshots keep working
// (the manager then answers 501).
type SnapshotStore interface {
	PutSnapshot(ctx context.Context, s *Snapshot) error // insert or replace
	GetSnapshot(ctx context.Context, id string) (*Snapshot, error)
	// ListSnapshots returns all snapshots, oldest first (CreatedAt, ID).
	ListSnapshots(ctx context.Context) ([]*Snapshot, error)
	DeleteSnapshot(ctx context.Context, id string) error
}

// TemplateBuild is one build of E2B's template build API (templates defined
// in code with the SDK's Template builder).
type TemplateBuild struct {
	ID         string // build id (uuid)
	TemplateID string // the template's name (without tag)
	Status     string // "waiting" | "building" | "ready" | "error"
	CreatedAt  time.Time
	UpdatedAt  time.Time
	Spec       string // JSON owned by the API (names, tags, resources, build spec, failure reason)
	Logs       string // JSON log entries, written when the build ends
}

// TemplateBuildStore is implemented by stores that persist SDK template
// builds; separate from Store like SnapshotStore.
type TemplateBuildStore interface {
	PutTemplateBuild(ctx context.Context, b *TemplateBuild) error // insert or replace
	GetTemplateBuild(ctx context.Context, id string) (*TemplateBuild, error)
	// ListTemplateBuilds returns the builds of template templateID, newest
	// first (CreatedAt, then ID), at most limit of them, without their Logs.
	ListTemplateBuilds(ctx context.Context, templateID string, limit int) ([]*TemplateBuild, error)
}

// ErrMoved is returned by Mover.ClaimSandbox when the sandbox is not a
// paused row of the node it was claimed from any more (resumed, moved or
// being resumed elsewhere).
var ErrMoved = errors.New("store: sandbox moved or resumed")

// Mover is implemented by stores the nodes of a cluster share (PostgreSQL):
// a paused sandbox's row moves from node to node, and every node reads
// every node's snapshots. A single host's store does not implement it.
// Such a store's PutSandbox never moves a row: writing a row that another
// node holds fails with ErrMoved (a stale copy cannot take it back).
type Mover interface {
	// ClaimSandbox makes the paused sandbox id this node's and sets its
	// state to state, in one transaction that succeeds only while its row
	// is on node from with state "paused" and an image: of two nodes
	// claiming one sandbox, one wins. check, when set, is asked about the
	// row first (its error is returned and nothing changes). A row that
	// changes node gets slot -1 and no guest address. It returns the row as
	// it is now; ErrNotFound when there is no such sandbox, ErrMoved when it
	// is not paused on from.
	ClaimSandbox(ctx context.Context, id, from, state string, check func(*Sandbox) error) (*Sandbox, error)
	// AnySnapshot returns a snapshot of any node by id, else the newest
	// with that name, and the node that made it; ErrNotFound when none.
	AnySnapshot(ctx context.Context, idOrName string) (*Snapshot, string, error)
	// ClearSnapshotName removes name from every node's snapshots (a new
	// snapshot takes it: names are unique in the cluster).
	ClearSnapshotName(ctx context.Context, name string) error
}

// Full is what both backends implement and what the daemon opens.
type Full interface {
	Store
	SnapshotStore
	TemplateBuildStore
	VolumeStore
	EventStore
	SecretStore
}
