package api

import (
	"encoding/json"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/volume"
)

// volumeMountsByID is a stand-in until the volume API (issue 27, helper
// volapi) resolves E2B's volumeMounts [{name, path}] by the volumes' names
// in the store: here name is taken as the volume's id on this node's
// Backing (the sandbox manager answers 400 for an unknown one). The lead
// replaces it with volapi's resolver at the merge.
func volumeMountsByID(raw []json.RawMessage) ([]volume.Mount, string) {
	var out []volume.Mount
	for i, r := range raw {
		var m struct{ Name, Path string }
		if err := json.Unmarshal(r, &m); err != nil || m.Name == "" || m.Path == "" {
			return nil, fmt.Sprintf("invalid mounts:\n\t- volume mount #%d: name and path are required", i)
		}
		out = append(out, volume.Mount{VolumeID: m.Name, Name: m.Name, Path: m.Path})
	}
	return out, ""
}
