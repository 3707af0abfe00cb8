package airlock

// Request and response bodies of the daemon's REST API that the daemon
// (internal/api) and this client both use: one definition for both sides.

// NewSandboxBody is the body of POST /v2/sandboxes (the client's part:
// the daemon also accepts E2B's other fields).
type NewSandboxBody struct {
	TemplateID          string            `json:"templateID,omitempty"`
	Timeout             int               `json:"timeout,omitempty"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	EnvVars             map[string]string `json:"envVars,omitempty"`
	AllowInternetAccess *bool             `json:"allow_internet_access,omitempty"`
}

// TimeoutBody is the body of POST /sandboxes/{id}/timeout, /resume and
// /connect: seconds from now.
type TimeoutBody struct {
	Timeout int `json:"timeout"`
}
