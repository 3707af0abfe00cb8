package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/volume"
)

// mountJSON is E2B's SandboxVolumeMount, plus Airlock's readOnly (E2B has
// no read-only mount; sent and echoed only when true).
type mountJSON struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// maxVolumeMounts bounds a create's volumeMounts.
const maxVolumeMounts = 32

// hiddenPaths are what a mount must not cover, and what covering each would
// hide: the sandbox's kernel interfaces and the agent that serves it.
var hiddenPaths = []struct{ path, what string }{
	{"/proc", "/proc"},
	{"/sys", "/sys"},
	{"/dev", "/dev"},
	{runtime.AgentGuestPath, "the sandbox agent"},
	{"/usr/bin/sudo", "the sandbox agent"},
}

// mountPathProblem is why p cannot be a mount path (E2B's reasons, then
// Airlock's own), "" when it can.
func mountPathProblem(p string) string {
	switch {
	case p == "":
		return "path cannot be empty"
	case !strings.HasPrefix(p, "/"):
		return "path must be absolute"
	case path.Clean(p) != p:
		return "path must not contain any '.' or '..' components"
	case p == "/":
		return "path '/' would hide the sandbox's root filesystem"
	case strings.ContainsRune(p, 0):
		return "path must not contain a NUL character"
	}
	for _, h := range hiddenPaths {
		// p is h, lies under it (inside the kernel's file systems), or
		// holds it (and would hide it).
		if p == h.path || strings.HasPrefix(p, h.path+"/") || strings.HasPrefix(h.path, p+"/") {
			return fmt.Sprintf("path '%s' would hide %s", p, h.what)
		}
	}
	return ""
}

// volumeMounts checks a create body's volumeMounts and resolves each name
// to its volume: a 400 naming every refused mount as E2B words it
// ("invalid mounts:\n\t- volume mount #0: …").
func (a *api) volumeMounts(ctx context.Context, raw []json.RawMessage) ([]volume.Mount, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if a.opts.Volumes == nil {
		if a.opts.NoVolumes != "" {
			return nil, &sandbox.Error{Code: http.StatusBadRequest, Msg: "Volume mounts are not enabled: " + a.opts.NoVolumes}
		}
		return nil, &sandbox.Error{Code: http.StatusBadRequest, Msg: "Volume mounts are not enabled."}
	}
	if len(raw) > maxVolumeMounts {
		return nil, &sandbox.Error{Code: http.StatusBadRequest, Msg: fmt.Sprintf("invalid mounts: at most %d volume mounts", maxVolumeMounts)}
	}
	var (
		out      []volume.Mount
		problems []string
		used     = map[string]bool{}
	)
	for i, r := range raw {
		var m mountJSON
		if err := json.Unmarshal(r, &m); err != nil {
			problems = append(problems, fmt.Sprintf("volume mount #%d: not an object {name, path}: %v", i, err))
			continue
		}
		if why := mountPathProblem(m.Path); why != "" {
			problems = append(problems, fmt.Sprintf("volume mount #%d: %s", i, why))
			continue
		}
		if used[m.Path] {
			problems = append(problems, fmt.Sprintf("volume mount #%d: path '%s' is already used", i, m.Path))
			continue
		}
		used[m.Path] = true
		v, err := a.opts.Volumes.Store.GetVolumeByName(ctx, m.Name)
		if errors.Is(err, store.ErrNotFound) || (err == nil && m.Name == "") {
			problems = append(problems, fmt.Sprintf("volume mount #%d: volume '%s' not found", i, m.Name))
			continue
		} else if err != nil {
			return nil, fmt.Errorf("looking volume %q up: %w", m.Name, err)
		}
		out = append(out, volume.Mount{VolumeID: v.ID, Name: v.Name, Path: m.Path, ReadOnly: m.ReadOnly})
		if volume.BucketReadOnly(v.Bucket) { // read-only in the sandbox as in s3fs
			out[len(out)-1].ReadOnly = true
		}
	}
	if len(problems) > 0 {
		return nil, &sandbox.Error{Code: http.StatusBadRequest, Msg: "invalid mounts:\n\t- " + strings.Join(problems, "\n\t- ")}
	}
	return out, nil
}

// mountsJSON is a sandbox's mounts as E2B lists them ([] when none).
func mountsJSON(ms []volume.Mount) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(ms))
	for _, m := range ms {
		b, _ := json.Marshal(mountJSON{Name: m.Name, Path: m.Path, ReadOnly: m.ReadOnly})
		out = append(out, b)
	}
	return out
}
