//go:build linux

package filesystem

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMetadataStoreXattrs(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(p, "user.other", []byte("not ours"), 0); err != nil {
		t.Skipf("the test dir's filesystem has no user xattrs: %v", err)
	}
	s := NewMetadataStore()
	if md, err := s.Read(p); err != nil || md != nil {
		t.Fatalf("no metadata yet: %v, %v", md, err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	long := string(make([]byte, 1000)) // longer than the first read buffer
	want := map[string]string{"owner": "Blue", "long": long}
	if err := s.SetXattrs(f, want); err != nil {
		t.Fatal(err)
	}
	if md, err := s.Read(p); err != nil || !maps.Equal(md, want) {
		t.Fatalf("read %d keys, %v; want owner and long", len(md), err)
	}
	// They move with the inode.
	q := filepath.Join(dir, "g")
	if err := os.Rename(p, q); err != nil {
		t.Fatal(err)
	}
	if md, _ := s.Read(q); md["owner"] != "Blue" {
		t.Fatalf("after rename: %v", md)
	}
	if _, err := s.Read(p); err == nil {
		t.Fatal("read of a removed name succeeded")
	}
}

func TestMetadataStoreWithoutXattrs(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewMetadataStore(WithoutXattrs())
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := s.SetXattrs(f, map[string]string{"k": "v"}); !errors.Is(err, ErrXattrsUnsupported) {
		t.Fatalf("SetXattrs = %v, want ErrXattrsUnsupported", err)
	}
	if md, err := s.Read(p); err != nil || md != nil {
		t.Fatalf("Read = %v, %v; want none", md, err)
	}
}
