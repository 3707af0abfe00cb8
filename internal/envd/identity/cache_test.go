package identity

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLookupCache: a user is parsed from the account files once while they
// stay unchanged, again after either changes, and never cached when they
// cannot be stat'ed; callers get copies.
func TestLookupCache(t *testing.T) {
	dir := t.TempDir()
	oldP, oldG, oldL := passwdFile, groupFile, lookupFiles
	t.Cleanup(func() {
		passwdFile, groupFile, lookupFiles = oldP, oldG, oldL
		cache.mu.Lock()
		clear(cache.users)
		cache.mu.Unlock()
	})
	passwdFile, groupFile = filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(passwdFile, "u:x:1000:1000::/home/u:/bin/sh\n")
	write(groupFile, "u:x:1000:\n")
	calls := 0
	uid := uint32(1000)
	lookupFiles = func(name string) (*User, error) {
		calls++
		return &User{Name: name, UID: uid, GID: 1000, Groups: []uint32{1000, 27}, Home: "/home/" + name}, nil
	}
	clear(cache.users)

	a, err := Lookup("u")
	if err != nil {
		t.Fatal(err)
	}
	a.Groups[0] = 9 // the caller's copy
	b, _ := Lookup("u")
	if calls != 1 {
		t.Fatalf("files parsed %d times for two lookups, want 1", calls)
	}
	if b.Groups[0] != 1000 || b.UID != 1000 {
		t.Fatalf("cached user changed through a caller's copy: %+v", b)
	}

	// usermod: passwd rewritten (new inode, other size).
	uid = 1001
	tmp := passwdFile + ".new"
	write(tmp, "u:x:1001:1000::/home/u:/bin/bash\n")
	if err := os.Rename(tmp, passwdFile); err != nil {
		t.Fatal(err)
	}
	if c, _ := Lookup("u"); c.UID != 1001 || calls != 2 {
		t.Fatalf("after a passwd change: uid %d, %d parses; want 1001, 2", c.UID, calls)
	}
	// group edited in place, same size, later mtime.
	write(groupFile, "u:x:1000:u\n")
	later := time.Now().Add(2 * time.Second)
	if err := os.Chtimes(groupFile, later, later); err != nil {
		t.Fatal(err)
	}
	Lookup("u")
	if calls != 3 {
		t.Fatalf("after a group change: %d parses, want 3", calls)
	}
	Lookup("u")
	if calls != 3 {
		t.Fatalf("unchanged files: %d parses, want 3", calls)
	}
	// Without the files nothing is cached.
	os.Remove(groupFile)
	Lookup("u")
	Lookup("u")
	if calls != 5 {
		t.Fatalf("without /etc/group: %d parses, want 5", calls)
	}
}
