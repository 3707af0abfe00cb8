package cluster_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestRouterImportsNoNodeCode checks the api tier's side of the cluster:
// the router (internal/cluster/gateway), placement, the contract and the
// `airlock serve --role api` composition (internal/cluster/apirole) link no
// node code, not even through another package. What they share with a node
// is the contract (this package and internal/cluster/wire) and leaves that
// import no sandbox code (middleware, store, startup, ...). Like
// internal/guest's TestHostDoesNotImportAgent, it reads `go list -deps`.
func TestRouterImportsNoNodeCode(t *testing.T) {
	const mod = "github.com/airlock-sandbox/airlock/"
	roots := []string{"internal/cluster", "internal/cluster/wire", "internal/cluster/placement",
		"internal/cluster/gateway", "internal/cluster/apirole"}
	// Node code: a package and everything under it ("/..."), or only the
	// package itself (the builder's spec, imagebuild/buildspec, is a leaf the
	// api tier reads).
	forbidden := []string{"internal/sandbox/...", "internal/runtime/...", "internal/network/...",
		"internal/api/...", "internal/proxy/...", "internal/daemon/...", "internal/console/...",
		"internal/envd/...", "internal/template/...", "internal/imagebuild"}
	isNode := func(pkg string) bool {
		p, ok := strings.CutPrefix(pkg, mod)
		if !ok {
			return false
		}
		for _, f := range forbidden {
			if tree, ok := strings.CutSuffix(f, "/..."); ok && (p == tree || strings.HasPrefix(p, tree+"/")) || p == f {
				return true
			}
		}
		return false
	}

	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to list dependencies: %v", err)
	}
	args := []string{"list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \",\"}}"}
	for _, r := range roots {
		args = append(args, mod+r)
	}
	out, err := exec.Command(goTool, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	imports := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		pkg, imps, _ := strings.Cut(strings.TrimSpace(line), " ")
		imports[pkg] = strings.Split(imps, ",")
	}
	for _, r := range roots {
		if _, ok := imports[mod+r]; !ok {
			t.Fatalf("%s is not in the listing; the listing is wrong:\n%s", r, out)
		}
	}
	// One line per root and node package it reaches, with the path to it.
	for _, r := range roots {
		via := map[string]string{mod + r: ""}
		queue := []string{mod + r}
		for len(queue) > 0 {
			pkg := queue[0]
			queue = queue[1:]
			for _, imp := range imports[pkg] {
				if _, seen := via[imp]; seen || imp == "" {
					continue
				}
				via[imp] = pkg
				if isNode(imp) {
					path := []string{strings.TrimPrefix(imp, mod)}
					for p := pkg; p != ""; p = via[p] {
						path = append(path, strings.TrimPrefix(p, mod))
					}
					slices.Reverse(path)
					t.Errorf("%s imports node code %s: %s", r, strings.TrimPrefix(imp, mod), strings.Join(path, " → "))
					continue // its own imports are node code too: one line is enough
				}
				queue = append(queue, imp)
			}
		}
	}
}
