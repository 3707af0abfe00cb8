package buildspec_test

import (
	"encoding/json"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/imagebuild/buildspec"
)

func TestParse(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(buildspec.Config{Kind: buildspec.Kind, From: "debian:12", CPUCount: 2, MemoryMB: 1024, Layers: []string{"h1"}})
	if err != nil {
		t.Fatal(err)
	}
	c, ok := buildspec.Parse(string(b))
	if !ok || c.From != "debian:12" || c.CPUCount != 2 || c.MemoryMB != 1024 || len(c.Layers) != 1 {
		t.Fatalf("Parse(%s) = %+v, %v; want the config back", b, c, ok)
	}
	for _, spec := range []string{"", "code-interpreter-v1", `{"kind":"recipe","cpuCount":2}`, `{"kind":`} {
		if c, ok := buildspec.Parse(spec); ok {
			t.Errorf("Parse(%q) = %+v, true; want false (not a Dockerfile build's spec)", spec, c)
		}
	}
}
