package guest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHostDoesNotImportAgent checks that the host side (the daemon and CLI,
// the Go SDK, the benchmarks) reaches the agent only through this package
// and the SDK's agentwire and proto packages: none of them links the
// agent's own packages.
func TestHostDoesNotImportAgent(t *testing.T) {
	const mod = "github.com/airlock-sandbox/airlock"
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to list dependencies: %v", err)
	}
	host := []string{mod + "/cmd/airlock", mod + "/sdk/...", mod + "/bench/..."}
	out, err := exec.Command(goTool, append([]string{"list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \",\"}}"}, host...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	seen := 0
	for line := range strings.Lines(string(out)) {
		pkg, imports, _ := strings.Cut(strings.TrimSpace(line), " ")
		if pkg == mod+"/internal/guest" {
			seen++
		}
		for imp := range strings.SplitSeq(imports, ",") {
			if imp == mod+"/internal/envd" || strings.HasPrefix(imp, mod+"/internal/envd/") {
				t.Errorf("%s imports the agent's package %s", pkg, imp)
			}
		}
	}
	if seen == 0 {
		t.Fatalf("internal/guest is not among the host's dependencies; the listing is wrong:\n%s", out)
	}
}
