package main

import (
	"os"
	"path/filepath"
	"sort"
	"testing"
)

func TestFinding(t *testing.T) {
	for name, want := range map[string]string{
		"TestReviewBuild/attack/H1-copy-symlink-to-etc": "H1",
		"TestReviewSandbox/attack/M2-fork-keeps-token":  "M2",
		"TestReviewEnvd/attack/R2-3-watch-outside":      "R2-3",
		"sdk: L6 the API key never reaches a sandbox":   "L6",
		"sdk: M6: no host mount of a guest disk":        "M6",
		"TestEscapeAttempts/attack/mount":               "",
		"TestAPIAbuse/abuse/deep-json":                  "",
		"sdk: Method names are not ids":                 "",
		"TestReviewX/attack/H1x":                        "",
	} {
		if got := finding(name); got != want {
			t.Errorf("finding(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestFindingOrder(t *testing.T) {
	ids := []string{"L7", "R2-10", "M10", "H1", "M2", "R2-2", "L1"}
	sort.Slice(ids, func(i, j int) bool { return findingLess(ids[i], ids[j]) })
	want := []string{"H1", "M2", "M10", "L1", "L7", "R2-2", "R2-10"}
	for i := range want {
		if ids[i] != want[i] {
			t.Fatalf("order %v, want %v", ids, want)
		}
	}
}

func TestReadNodeReviewOnly(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cluster.out")
	out := "▶ cluster security\n" +
		"  ✔ M1: a replayed plain-HTTP request is refused (12ms)\n" +
		"  ✖ M1: a client without a certificate is refused (3ms)\n" +
		"  ✔ sandboxes are spread over the nodes (40ms)\n" +
		"✔ cluster security (60ms)\n" +
		"▶ M3 and L7\n" +
		"  ✔ M3: a malformed signature is refused (5ms)\n" +
		"✔ M3 and L7 (6ms)\n" +
		"✖ failing tests:\n" +
		"✖ M1: a client without a certificate is refused (3ms)\n"
	if err := os.WriteFile(p, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	var r report
	if err := r.readNode(p, true); err != nil {
		t.Fatal(err)
	}
	if len(r.attacks) != 3 || !r.attacks[0].passed || r.attacks[1].passed || r.attacks[2].name != "sdk: M3: a malformed signature is refused" {
		t.Fatalf("attacks %+v, want the two M1 tests (held, failed) and the M3 one, no suite and no summary line", r.attacks)
	}
	if by := r.byFinding(); len(by["M1"]) != 2 || count(by["M1"]) != 1 {
		t.Fatalf("byFinding %+v", by)
	}
}
