package secretbox

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSealOpen(t *testing.T) {
	b, err := New(bytes.Repeat([]byte{7}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	s1, err := b.Seal([]byte("secret"), []byte("vol-1"))
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := b.Seal([]byte("secret"), []byte("vol-1"))
	if bytes.Equal(s1, s2) {
		t.Fatal("two seals of one value are equal (nonce reused)")
	}
	if bytes.Contains(s1, []byte("secret")) {
		t.Fatal("sealed value holds the plaintext")
	}
	pt, err := b.Open(s1, []byte("vol-1"))
	if err != nil || string(pt) != "secret" {
		t.Fatalf("Open = %q, %v", pt, err)
	}
	if _, err := b.Open(s1, []byte("vol-2")); !errors.Is(err, ErrOpen) {
		t.Fatalf("Open with other ad: %v, want ErrOpen", err)
	}
	bad := bytes.Clone(s1)
	bad[len(bad)-1] ^= 1
	if _, err := b.Open(bad, []byte("vol-1")); !errors.Is(err, ErrOpen) {
		t.Fatalf("Open of tampered value: %v, want ErrOpen", err)
	}
	if _, err := b.Open(s1[:10], []byte("vol-1")); !errors.Is(err, ErrOpen) {
		t.Fatalf("Open of truncated value: %v, want ErrOpen", err)
	}
	other, _ := New(bytes.Repeat([]byte{8}, KeySize))
	if _, err := other.Open(s1, []byte("vol-1")); !errors.Is(err, ErrOpen) {
		t.Fatalf("Open with another key: %v, want ErrOpen", err)
	}
	if _, err := New(make([]byte, 16)); err == nil {
		t.Fatal("New accepted a 16-byte key")
	}
}

func TestLoadOrCreate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "secrets.key")
	if _, err := LoadOrCreate(path, false); err == nil {
		t.Fatal("LoadOrCreate(create=false) of a missing file succeeded")
	}
	b1, err := LoadOrCreate(path, true)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	if di, _ := os.Stat(filepath.Dir(path)); di.Mode().Perm() != 0o700 {
		t.Fatalf("key dir mode %v, want 0700", di.Mode().Perm())
	}
	sealed, _ := b1.Seal([]byte("x"), nil)
	b2, err := LoadOrCreate(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if pt, err := b2.Open(sealed, nil); err != nil || string(pt) != "x" {
		t.Fatalf("reloaded key does not open: %q %v", pt, err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(path, true); err == nil || !strings.Contains(err.Error(), "0600") {
		t.Fatalf("world-readable key accepted: %v", err)
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("abcd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(short, true); err == nil {
		t.Fatal("a short key was accepted")
	}
}
