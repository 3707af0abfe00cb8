// Package buildspec is the template spec a Dockerfile build records (the
// JSON of a template row's spec; imagebuild.Config is this type with the
// builder's methods). It imports nothing of Airlock's, so the cluster's api
// tier, which reads a template's resources from the shared templates table
// to place a create, does not link the builder and the sandbox core behind
// it.
package buildspec

import "encoding/json"

// Kind marks template specs written by a Dockerfile build.
const Kind = "dockerfile"

// Config is what a Dockerfile template carries besides its files. It is
// recorded as the template's spec (JSON).
type Config struct {
	Kind     string            `json:"kind"`
	From     string            `json:"from"`
	Env      map[string]string `json:"env,omitempty"`
	User     string            `json:"user,omitempty"`
	Workdir  string            `json:"workdir,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	CPUCount int               `json:"cpuCount,omitempty"`
	MemoryMB int               `json:"memoryMB,omitempty"`
	StartCmd string            `json:"startCmd,omitempty"`
	ReadyCmd string            `json:"readyCmd,omitempty"`
	Layers   []string          `json:"layers"`
}

// Parse decodes a template spec written by a Dockerfile build; ok is false
// for other specs (built-in recipes).
func Parse(spec string) (*Config, bool) {
	var c Config
	if err := json.Unmarshal([]byte(spec), &c); err != nil || c.Kind != Kind {
		return nil, false
	}
	return &c, true
}
