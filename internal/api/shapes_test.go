package api

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden.json from the current code")

// TestSandboxShapesGolden pins the JSON of the list entry and the detail
// of a sandbox (GET /v2/sandboxes, GET /sandboxes/{id}) byte for byte: the
// shapes are the public SDK's types (airlock.ListedSandbox,
// airlock.SandboxDetail), and a change to those must not change the wire.
// The golden files were written by the daemon's own copies of the shapes
// before they were replaced (go test -run TestSandboxShapesGolden -update).
func TestSandboxShapesGolden(t *testing.T) {
	at := time.Date(2026, 11, 28, 8, 0, 0, 0, time.FixedZone("CET", 3600))
	full := &sandbox.Sandbox{
		ID: "ifull", TemplateID: "tpl1", Alias: "base", State: sandbox.StateRunning,
		AccessToken: "tok", TrafficToken: "traffic", Metadata: map[string]string{"k": "v"},
		AllowInternet: true, AllowOut: []string{"10.0.0.0/8"}, DenyOut: []string{"0.0.0.0/0"},
		CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024, StartedAt: at, EndAt: at.Add(5 * time.Minute),
		OnTimeout: "pause", AutoResume: true,
	}
	bare := &sandbox.Sandbox{ID: "ibare", TemplateID: "tpl2", State: sandbox.StatePaused, StartedAt: at, EndAt: at}
	cases := []struct {
		name string
		a    *api
		v    func(a *api) any
	}{
		{"list", &api{}, func(*api) any { return []any{toListed(full), toListed(bare)} }},
		{"detail-full", &api{opts: Options{Domain: "example.test"}}, func(a *api) any { return a.toDetail(full) }},
		{"detail-bare", &api{}, func(a *api) any { return a.toDetail(bare) }},
	}
	for _, c := range cases {
		got, err := json.MarshalIndent(c.v(c.a), "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, '\n')
		path := filepath.Join("testdata", "shape-"+c.name+".golden.json")
		if *updateGolden {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s JSON changed:\ngot  %s\nwant %s", c.name, got, want)
		}
	}
}
