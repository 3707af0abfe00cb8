package airlock

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The request and response bodies of the daemon's REST API that both sides
// use: the daemon (internal/api) decodes requests into and encodes
// responses from these types, and this client does the reverse. Request
// fields are pointers where the daemon tells "omitted" from zero, and
// carry omitempty so the client sends only what it sets; response fields
// are tagged as the daemon sends them.

// Error is E2B's error model: Code always equals the HTTP status.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// SandboxInfo is the E2B Sandbox object (the answer of create, connect,
// resume and of each fork child).
type SandboxInfo struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	Alias              string  `json:"alias,omitempty"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// NewSandboxBody is the body of POST /sandboxes (E2B's NewSandbox) and
// POST /v2/sandboxes (NewSandboxV2), with Airlock's resource limits.
type NewSandboxBody struct {
	TemplateID          string            `json:"templateID,omitempty"`
	Timeout             *int64            `json:"timeout,omitempty"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	EnvVars             map[string]string `json:"envVars,omitempty"`
	AllowInternetAccess *bool             `json:"allow_internet_access,omitempty"`
	Secure              *bool             `json:"secure,omitempty"`
	AutoPause           *bool             `json:"autoPause,omitempty"`
	// AutoPauseMemory false: the timeout pause keeps only the disk.
	AutoPauseMemory *bool `json:"autoPauseMemory,omitempty"`
	AutoResume      *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume,omitempty"`
	MCP          json.RawMessage   `json:"mcp,omitempty"`
	Network      *NetworkConfig    `json:"network,omitempty"`
	VolumeMounts []json.RawMessage `json:"volumeMounts,omitempty"`
	Limits
}

// NetworkConfig is the part of E2B's SandboxNetworkConfig (the create
// body's network) that Airlock judges.
type NetworkConfig struct {
	AllowOut           []string        `json:"allowOut,omitempty"`
	DenyOut            []string        `json:"denyOut,omitempty"`
	AllowPublicTraffic *bool           `json:"allowPublicTraffic,omitempty"`
	MaskRequestHost    *string         `json:"maskRequestHost,omitempty"`
	Rules              json.RawMessage `json:"rules,omitempty"`
	EgressProxy        json.RawMessage `json:"egressProxy,omitempty"`
	// Approval is Airlock's egress approval hook (approvals.go).
	Approval *ApprovalConfig `json:"approval,omitempty"`
}

// Limits are Airlock's extension keys of the create body (E2B takes CPU
// and memory from the template; its SDKs never send these). Zero values
// take the daemon's defaults; out-of-range values are a 400.
type Limits struct {
	CPUCount     int `json:"cpuCount,omitempty"`
	MemoryMB     int `json:"memoryMB,omitempty"`
	DiskSizeMB   int `json:"diskSizeMB,omitempty"`
	MaxProcesses int `json:"maxProcesses,omitempty"`
	MaxOpenFiles int `json:"maxOpenFiles,omitempty"`
}

// TimeoutBody is the body of POST /sandboxes/{id}/timeout and /resume:
// seconds from now.
type TimeoutBody struct {
	Timeout *int64 `json:"timeout,omitempty"`
}

// ConnectBody is the body of POST /sandboxes/{id}/connect (v1 and v2).
type ConnectBody struct {
	Timeout *int64 `json:"timeout,omitempty"`
	Memory  *bool  `json:"memory,omitempty"`
}

// ForkBody is the body of POST /sandboxes/{id}/fork.
type ForkBody struct {
	Timeout *int64 `json:"timeout,omitempty"`
	Count   *int   `json:"count,omitempty"`
}

// ForkResult is one child of a fork: Sandbox or Error.
type ForkResult struct {
	Sandbox *SandboxInfo `json:"sandbox,omitempty"`
	Error   *Error       `json:"error,omitempty"`
}

// NetworkUpdate is the body of PUT /sandboxes/{id}/network: the whole
// egress policy is replaced; omitted fields are cleared (internet access
// back on).
type NetworkUpdate struct {
	AllowOut            []string        `json:"allowOut,omitempty"`
	DenyOut             []string        `json:"denyOut,omitempty"`
	AllowInternetAccess *bool           `json:"allow_internet_access,omitempty"`
	Rules               json.RawMessage `json:"rules,omitempty"`
	EgressProxy         json.RawMessage `json:"egressProxy,omitempty"`
	// Approval replaces the approval hook (omitted: removed).
	Approval *ApprovalConfig `json:"approval,omitempty"`
}

// NetworkLog is the body of GET /sandboxes/{id}/network/log.
type NetworkLog struct {
	SandboxID string        `json:"sandboxID"`
	Entries   []EgressEntry `json:"entries"`
	// Dropped counts older entries no longer kept.
	Dropped uint64 `json:"dropped"`
}

// SnapshotBody is the body of POST /sandboxes/{id}/snapshots.
type SnapshotBody struct {
	Name *string `json:"name,omitempty"`
}

// Snapshot is a named snapshot (E2B's SnapshotInfo plus Airlock's fields):
// GET /snapshots, POST /sandboxes/{id}/snapshots.
type Snapshot struct {
	SnapshotID string    `json:"snapshotID"`
	Names      []string  `json:"names"`
	SandboxID  string    `json:"sandboxID"`
	TemplateID string    `json:"templateID"`
	SizeBytes  int64     `json:"sizeBytes"`
	CreatedAt  time.Time `json:"createdAt"`
	Problem    string    `json:"problem,omitempty"`
}

// TemplateConfig is the configuration of a Dockerfile template.
type TemplateConfig struct {
	From     string            `json:"from,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	User     string            `json:"user,omitempty"`
	Workdir  string            `json:"workdir,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	StartCmd string            `json:"startCmd,omitempty"`
	ReadyCmd string            `json:"readyCmd,omitempty"`
	Layers   []string          `json:"layers,omitempty"`
}

// Progress is one progress line of a template build's NDJSON stream.
type Progress struct {
	Phase   string `json:"phase"`
	Message string `json:"message"`
	Done    int64  `json:"done"`
	Total   int64  `json:"total"`
}

// DockerfileBuild are the options of a Dockerfile template build
// (POST /airlock/v1/templates/{name}/build with a context tar), sent as
// query parameters: Query encodes them, ParseDockerfileBuild decodes them.
type DockerfileBuild struct {
	Dockerfile string            // path of the Dockerfile inside the context; default "Dockerfile"
	BuildArgs  map[string]string // --build-arg
	CPUCount   int
	MemoryMB   int
	StartCmd   string
	ReadyCmd   string
	NoNetwork  bool
	NoCache    bool
	// RegistryUsername and RegistryPassword authenticate the FROM pull of a
	// build the daemon starts itself (E2B's template build API,
	// fromImageRegistry). They never travel in a build request: Query
	// leaves them out.
	RegistryUsername, RegistryPassword string
}

// Limits of a Dockerfile build's cpuCount and memoryMB.
const (
	MaxBuildCPUCount = 64
	MaxBuildMemoryMB = 1 << 20
)

// Query returns the build's query parameters (zero values left out).
func (o DockerfileBuild) Query() url.Values {
	q := url.Values{}
	if o.Dockerfile != "" {
		q.Set("dockerfile", o.Dockerfile)
	}
	if o.CPUCount > 0 {
		q.Set("cpuCount", strconv.Itoa(o.CPUCount))
	}
	if o.MemoryMB > 0 {
		q.Set("memoryMB", strconv.Itoa(o.MemoryMB))
	}
	if o.StartCmd != "" {
		q.Set("startCmd", o.StartCmd)
	}
	if o.ReadyCmd != "" {
		q.Set("readyCmd", o.ReadyCmd)
	}
	if o.NoNetwork {
		q.Set("noNetwork", "true")
	}
	if o.NoCache {
		q.Set("noCache", "true")
	}
	for k, v := range o.BuildArgs {
		q.Add("buildArg", k+"="+v)
	}
	return q
}

// ParseDockerfileBuild decodes a build's query parameters; the error says
// which one is invalid.
func ParseDockerfileBuild(q url.Values) (DockerfileBuild, error) {
	o := DockerfileBuild{Dockerfile: q.Get("dockerfile"), StartCmd: q.Get("startCmd"), ReadyCmd: q.Get("readyCmd"), BuildArgs: map[string]string{}}
	if o.Dockerfile == "" {
		o.Dockerfile = "Dockerfile"
	}
	for _, f := range []struct {
		key string
		dst *int
		max int
	}{{"cpuCount", &o.CPUCount, MaxBuildCPUCount}, {"memoryMB", &o.MemoryMB, MaxBuildMemoryMB}} {
		if v := q.Get(f.key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > f.max {
				return o, fmt.Errorf("invalid %s %q: want an integer between 0 and %d", f.key, v, f.max)
			}
			*f.dst = n
		}
	}
	o.NoNetwork = q.Get("noNetwork") == "true" || q.Get("noNetwork") == "1"
	o.NoCache = q.Get("noCache") == "true" || q.Get("noCache") == "1"
	for _, kv := range q["buildArg"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return o, fmt.Errorf("invalid buildArg %q: want KEY=VALUE", kv)
		}
		o.BuildArgs[k] = v
	}
	return o, nil
}
