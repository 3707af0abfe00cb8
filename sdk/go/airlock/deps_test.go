package airlock

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSDKImportsNoInternal checks that the public Go SDK (this package and
// the packages under it: agentwire, the generated proto) links no package
// of the module's internal/ tree: Go refuses to let a program outside the
// module import those, so a type the SDK exposes from there could not be
// named by its users. The example module (sdk/go/examples) builds against
// the SDK from outside.
func TestSDKImportsNoInternal(t *testing.T) {
	const mod = "github.com/airlock-sandbox/airlock"
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to list dependencies: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \",\"}}", mod+"/sdk/go/airlock/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	seen := 0
	for line := range strings.Lines(string(out)) {
		pkg, imports, _ := strings.Cut(strings.TrimSpace(line), " ")
		if pkg == mod+"/sdk/go/airlock" {
			seen++
		}
		for imp := range strings.SplitSeq(imports, ",") {
			if strings.HasPrefix(imp, mod+"/") && strings.Contains(imp+"/", "/internal/") {
				t.Errorf("%s imports %s: the public SDK must not depend on internal/ packages", pkg, imp)
			}
		}
	}
	if seen == 0 {
		t.Fatalf("sdk/go/airlock is not in the listing; it is wrong:\n%s", out)
	}
}
