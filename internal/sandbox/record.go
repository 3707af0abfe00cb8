package sandbox

import (
	"encoding/json"
	"github.com/airlock-sandbox/airlock/internal/approval"
	"slices"

	"github.com/airlock-sandbox/airlock/internal/egressproxy"
	"github.com/airlock-sandbox/airlock/internal/volume"
)

// The sandbox record's codec: the lifecycle values and the JSON kept in
// store.Sandbox.Extra (auto-resume, egress policy, base template, agent,
// filesystem-only pause).

// Lifecycle values of store.Sandbox.OnTimeout.
const (
	OnTimeoutKill  = "kill"
	OnTimeoutPause = "pause"
)

func onTimeout(autoPause bool) string {
	if autoPause {
		return OnTimeoutPause
	}
	return OnTimeoutKill
}

// extra is the JSON kept in store.Sandbox.Extra.
type extra struct {
	AutoResume bool `json:"autoResume,omitempty"`
	// Egress policy (netpolicy.go), re-applied after a daemon restart.
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
	// MaskRequestHost is the Host header the proxy gives inbound requests
	// (E2B's network.maskRequestHost; "${PORT}" is the sandbox port).
	MaskRequestHost string `json:"maskRequestHost,omitempty"`
	// NetworkRules are E2B's network.rules (issue 29: header and query
	// transforms applied by the node's egress proxy), kept with the
	// sandbox so a pause/resume, a fork and a daemon restart keep them.
	// Secret values are never here, only ${e2b.secrets.<name>} placeholders.
	NetworkRules egressproxy.Rules `json:"networkRules,omitempty"`
	// EgressProxy is E2B's network.egressProxy (egressproxy.go in this
	// package), its password sealed.
	EgressProxy *EgressProxy `json:"egressProxy,omitempty"`
	// Approval is network.approval, the egress approval hook (issue 28
	// part 3, internal/approval), with its webhook secret.
	Approval *approval.Config `json:"approval,omitempty"`
	// ApprovalMemo are the hook's remembered answers (approval.go).
	ApprovalMemo []approval.Memo `json:"approvalMemo,omitempty"`
	// BaseTemplate is the template under a sandbox created from a named
	// snapshot (TemplateID is then the snapshot's id).
	BaseTemplate string `json:"baseTemplate,omitempty"`
	// Agent is the host path of the agent binary the sandbox runs
	// (agentbin: one immutable path per build). Its restores must map the
	// same binary; "" in records from before it was kept (the current one).
	Agent string `json:"agent,omitempty"`
	// DiskOnly: paused without memory (pausedisk.go); PauseDiskOnly: the
	// timeout pause keeps only the disk (E2B's keepMemory: false).
	DiskOnly      bool `json:"diskOnly,omitempty"`
	PauseDiskOnly bool `json:"pauseDiskOnly,omitempty"`
	// Image is the artifact-store key of the paused sandbox's image (memory
	// and writable layer, move.go): set while it is paused on a cluster
	// node, so another node can resume it. The api tier reads it too
	// (cluster.Route.Movable): the name is part of the cluster contract.
	Image string `json:"image,omitempty"`
	// ImageDigest is the digest of what Image held when this node wrote it
	// (NodeHooks.ExportPaused): a resume fetches the image only when the store's copy
	// has it, whatever the store's metadata says.
	ImageDigest string `json:"imageDigest,omitempty"`
	// Evacuated: paused by a drain or its node's stop, not by its user: the
	// next request resumes it (wherever it lands), with LeftMs of its
	// timeout. Also read by the api tier (cluster.Route.Evacuated).
	Evacuated bool  `json:"evacuated,omitempty"`
	LeftMs    int64 `json:"leftMs,omitempty"`
	// ImageBuild and AgentBlob, with Image: the runtime build that saved
	// the memory image and the agent binary in the store, which a node
	// checks before it adopts the sandbox (Manager.canResume).
	ImageBuild string `json:"imageBuild,omitempty"`
	AgentBlob  string `json:"agentBlob,omitempty"`
	// Uploading: paused on this cluster node, its checkpoint durable here,
	// its image not yet in the artifact store (the node uploads it in the
	// background: internal/cluster/node, upload.go); Image is set
	// when it is. Also read by the api tier (cluster.Route.Uploading).
	Uploading bool `json:"uploading,omitempty"`
	// Volumes are the sandbox's volume mounts (volumes.go): a fork, a
	// snapshot and a resume mount the same volumes.
	Volumes []volume.Mount `json:"volumes,omitempty"`
}

func encodeExtra(x extra) string {
	if !x.AutoResume && len(x.AllowOut) == 0 && len(x.DenyOut) == 0 && x.BaseTemplate == "" && x.Agent == "" && !x.DiskOnly && !x.PauseDiskOnly &&
		x.Image == "" && !x.Evacuated && x.MaskRequestHost == "" && !x.Uploading && len(x.Volumes) == 0 && len(x.NetworkRules) == 0 &&
		x.EgressProxy == nil {
		return ""
	}
	b, _ := json.Marshal(x)
	return string(b)
}

func decodeExtra(s string) extra {
	var x extra
	if s != "" {
		_ = json.Unmarshal([]byte(s), &x)
	}
	return x
}

// newExtra is the record extra of a sandbox created by req.
func newExtra(req CreateRequest) extra {
	x := extra{AutoResume: req.AutoResume, PauseDiskOnly: req.AutoPause && req.AutoPauseDiskOnly, MaskRequestHost: req.MaskRequestHost,
		Volumes: slices.Clone(req.VolumeMounts), NetworkRules: req.NetworkRules.Clone(),
		EgressProxy: req.EgressProxy.Clone()}
	x.AllowOut, x.DenyOut = req.Egress.Strings()
	x.Approval = req.Approval.Clone()
	return x
}
