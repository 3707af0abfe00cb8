//go:build e2e

package gohttp

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSDKExampleQuickstart builds sdk/go/examples/quickstart (its own Go
// module, which reaches the SDK through a replace directive, so it can use
// only the SDK's public packages) and runs it against the daemon: a
// sandbox, a streamed command, a cell with a chart, a file up and down, a
// pause and a resume. The program checks each step and exits non-zero at
// the first that fails.
func TestSDKExampleQuickstart(t *testing.T) {
	e := loadEnv(t)
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to build the example: %v", err)
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "sdk", "go", "examples", "quickstart"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "quickstart")
	build := exec.Command(goTool, "build", "-o", bin, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the example module %s: %v\n%s", dir, err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-timeout", "5m")
	cmd.Env = append(os.Environ(), "AIRLOCK_URL="+e.apiURL, "AIRLOCK_API_KEY="+e.apiKey, "E2B_SANDBOX_URL="+e.sandboxURL)
	out, err := cmd.CombinedOutput()
	t.Logf("quickstart output:\n%s", out)
	if err != nil {
		t.Fatalf("the example failed: %v", err)
	}
	for _, want := range []string{"created sandbox ", "  | line 3", "command exited 0", "line chart \"Squares\"", "uploaded and downloaded /home/user/hello.txt", "paused: state paused", "resumed: the cell's variable is still 42"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the example's output lacks %q", want)
		}
	}
}
