package template

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestRecipeHashStable(t *testing.T) {
	r := &Recipe{Name: "x", Suite: "bookworm", Packages: []string{"curl", "bash", "git"}, Setup: []string{"true"}}
	h1 := r.Hash()
	if len(h1) != 64 {
		t.Fatalf("hash %q: want 64 hex chars", h1)
	}
	if h2 := r.Hash(); h2 != h1 {
		t.Fatalf("hash not stable: %s vs %s", h1, h2)
	}
	// Package order and duplicates do not matter.
	same := &Recipe{Name: "x", Suite: "bookworm", Packages: []string{"git", "bash", "curl", "bash"}, Setup: []string{"true"}}
	if same.Hash() != h1 {
		t.Fatalf("package order changed the hash")
	}
	// The canonical spec carries the recipe version.
	var spec map[string]any
	if err := json.Unmarshal([]byte(r.SpecJSON()), &spec); err != nil {
		t.Fatal(err)
	}
	if spec["version"] != float64(recipeVersion) {
		t.Fatalf("spec %s lacks version %d", r.SpecJSON(), recipeVersion)
	}
	// The recipe slice itself is not reordered by hashing.
	if r.Packages[0] != "curl" {
		t.Fatalf("Hash mutated the recipe: %v", r.Packages)
	}
}

func TestRecipeHashChanges(t *testing.T) {
	base := Recipe{Name: "x", Suite: "bookworm", Packages: []string{"bash"}, Setup: []string{"a", "b"}}
	h := base.Hash()
	variants := map[string]Recipe{
		"package added": {Name: "x", Suite: "bookworm", Packages: []string{"bash", "curl"}, Setup: []string{"a", "b"}},
		"suite":         {Name: "x", Suite: "trixie", Packages: []string{"bash"}, Setup: []string{"a", "b"}},
		"setup order":   {Name: "x", Suite: "bookworm", Packages: []string{"bash"}, Setup: []string{"b", "a"}},
		"name":          {Name: "y", Suite: "bookworm", Packages: []string{"bash"}, Setup: []string{"a", "b"}},
	}
	for what, v := range variants {
		if v.Hash() == h {
			t.Errorf("%s: hash unchanged", what)
		}
	}
}

func TestBuiltinRecipes(t *testing.T) {
	if got := RecipeNames(); !slices.Equal(got, []string{"base", "code-interpreter-v1"}) {
		t.Fatalf("RecipeNames = %v", got)
	}
	base, err := LookupRecipe("base")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"bash", "python3", "python-is-python3", "curl", "git", "sudo", "ncurses-bin", "coreutils", "procps"} {
		if !slices.Contains(base.Packages, p) {
			t.Errorf("base lacks %s", p)
		}
	}
	setup := strings.Join(base.Setup, "\n")
	for _, want := range []string{"--uid 1000", "/etc/sudoers.d/user", "NOPASSWD: ALL", "umask 022", "/usr/local/bin"} {
		if !strings.Contains(setup, want) {
			t.Errorf("base setup lacks %q", want)
		}
	}
	ci, err := LookupRecipe("code-interpreter-v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range base.Packages {
		if !slices.Contains(ci.Packages, p) {
			t.Errorf("code-interpreter-v1 lacks base package %s", p)
		}
	}
	for _, p := range []string{"python3-ipykernel", "python3-pandas", "python3-matplotlib", "nodejs"} {
		if !slices.Contains(ci.Packages, p) {
			t.Errorf("code-interpreter-v1 lacks %s", p)
		}
	}
	if ci.Hash() == base.Hash() {
		t.Fatal("recipes share a hash")
	}
	if _, err := LookupRecipe("nope"); !errors.Is(err, ErrUnknownRecipe) {
		t.Fatalf("LookupRecipe(nope) = %v, want ErrUnknownRecipe", err)
	}
}
