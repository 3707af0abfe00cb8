package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidID(t *testing.T) {
	for _, id := range []string{"a", "i0123456789abcdefghij", strings.Repeat("z", 64), "boot0", "0"} {
		if err := ValidID(id); err != nil {
			t.Errorf("ValidID(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range []string{"", strings.Repeat("z", 65), "A", "a-b", "a.b", "a/b", "../x", "é", "a b", "a\x00"} {
		if err := ValidID(id); err == nil {
			t.Errorf("ValidID(%q) = nil, want an error", id)
		}
	}
}

func TestIDChars(t *testing.T) {
	if !IDChars(strings.Repeat("a0", 100)) || IDChars("") || IDChars("a-b") || IDChars("A") {
		t.Error("IDChars accepts exactly the non-empty strings of [a-z0-9]")
	}
}

func TestInvalidSpec(t *testing.T) {
	spec := InvalidSpec("gvisor")
	err := CheckID(spec, "A")
	if !errors.Is(err, ErrInvalidSpec) || !errors.Is(err, spec) {
		t.Fatalf("CheckID = %v, want it to be ErrInvalidSpec and the runtime's own", err)
	}
	if got := err.Error(); !strings.HasPrefix(got, "gvisor: invalid sandbox spec: id ") {
		t.Errorf("message %q", got)
	}
}

func TestMakeSandboxDir(t *testing.T) {
	spec := InvalidSpec("test")
	dir := filepath.Join(t.TempDir(), "sandboxes", "a")
	if err := MakeSandboxDir(dir, spec); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir: %v %v", fi, err)
	}
	if err := MakeSandboxDir(dir, spec); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("second MakeSandboxDir = %v, want ErrInvalidSpec", err)
	}
}

func TestCleanup(t *testing.T) {
	var got []int
	var c Cleanup
	c.Push(func(context.Context) { got = append(got, 1) })
	c.Push(func(ctx context.Context) {
		if ctx.Err() != nil {
			t.Error("cleanup context already ended")
		}
		got = append(got, 2)
	})
	var err error
	c.Unwind(context.Background(), &err)
	if len(got) != 0 {
		t.Fatalf("steps ran on success: %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = errors.New("failed")
	c.Unwind(ctx, &err)
	if len(got) != 2 || got[0] != 2 || got[1] != 1 {
		t.Fatalf("steps ran as %v, want [2 1]", got)
	}
}
