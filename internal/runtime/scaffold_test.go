package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
