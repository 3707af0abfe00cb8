package startup_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/startup"
	"github.com/airlock-sandbox/airlock/internal/store/sqlite"
)

// openStore is a fresh SQLite store (a single host's) in a test directory.
func openStore(t *testing.T) *sqlite.DB {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestResolveAPIKeyGeneratesOnceAndReuses(t *testing.T) {
	t.Setenv("AIRLOCK_API_KEY", "")
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t)
	key, err := startup.APIKey(ctx, "", dir, st)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(key) {
		t.Fatalf("generated key %q is not e2b_+40 hex", key)
	}
	fi, err := os.Stat(filepath.Join(dir, "api-key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("api-key file: %v %v", fi, err)
	}
	if v, _ := st.GetSetting(ctx, startup.APIKeySetting); v != key {
		t.Fatalf("setting = %q", v)
	}
	again, err := startup.APIKey(ctx, "", dir, st)
	if err != nil || again != key {
		t.Fatalf("second start got %q (%v), want %q", again, err, key)
	}
	// The file alone (fresh database) is enough to keep the key.
	fresh := openStore(t)
	if k, _ := startup.APIKey(ctx, "", dir, fresh); k != key {
		t.Fatalf("key from file = %q", k)
	}
	if k, _ := startup.APIKey(ctx, "e2b_flag", dir, st); k != "e2b_flag" {
		t.Fatalf("flag ignored: %q", k)
	}
	t.Setenv("AIRLOCK_API_KEY", "e2b_env")
	if k, _ := startup.APIKey(ctx, "", dir, st); k != "e2b_env" {
		t.Fatalf("env ignored: %q", k)
	}
}

func TestDisplayURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:49982": "http://127.0.0.1:49982",
		"0.0.0.0:80":      "http://127.0.0.1:80",
		"[::1]:5":         "http://[::1]:5",
	} {
		addr, _ := net.ResolveTCPAddr("tcp", in)
		if got := startup.DisplayURL(addr); got != want {
			t.Errorf("%s: got %s want %s", in, got, want)
		}
	}
}

// TestAPIKeyConcurrentFirstStart: daemons that start at once on one empty
// database (a cluster's first start) all end up with the same key, the
// one stored, and each writes that key to its own data dir.
func TestAPIKeyConcurrentFirstStart(t *testing.T) {
	t.Setenv("AIRLOCK_API_KEY", "")
	ctx := context.Background()
	st := openStore(t)
	const n = 6
	keys := make([]string, n)
	dirs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		dirs[i] = t.TempDir()
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys[i], errs[i] = startup.APIKey(ctx, "", dirs[i], st)
		}()
	}
	wg.Wait()
	stored, err := st.GetSetting(ctx, startup.APIKeySetting)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if errs[i] != nil || keys[i] != stored {
			t.Fatalf("daemon %d: key %q (%v), stored %q", i, keys[i], errs[i], stored)
		}
		b, _ := os.ReadFile(filepath.Join(dirs[i], "api-key"))
		if strings.TrimSpace(string(b)) != stored {
			t.Fatalf("daemon %d wrote %q to its api-key file, stored %q", i, b, stored)
		}
	}
}
