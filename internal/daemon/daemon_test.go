package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

func TestResolveAPIKeyGeneratesOnceAndReuses(t *testing.T) {
	t.Setenv("AIRLOCK_API_KEY", "")
	ctx := context.Background()
	dir := t.TempDir()
	st := sandboxtest.NewStore()
	key, err := resolveAPIKey(ctx, "", dir, st)
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
	if v, _ := st.GetSetting(ctx, apiKeySetting); v != key {
		t.Fatalf("setting = %q", v)
	}
	again, err := resolveAPIKey(ctx, "", dir, st)
	if err != nil || again != key {
		t.Fatalf("second start got %q (%v), want %q", again, err, key)
	}
	// The file alone (fresh database) is enough to keep the key.
	fresh := sandboxtest.NewStore()
	if k, _ := resolveAPIKey(ctx, "", dir, fresh); k != key {
		t.Fatalf("key from file = %q", k)
	}
	if k, _ := resolveAPIKey(ctx, "e2b_flag", dir, st); k != "e2b_flag" {
		t.Fatalf("flag ignored: %q", k)
	}
	t.Setenv("AIRLOCK_API_KEY", "e2b_env")
	if k, _ := resolveAPIKey(ctx, "", dir, st); k != "e2b_env" {
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
		if got := displayURL(addr); got != want {
			t.Errorf("%s: got %s want %s", in, got, want)
		}
	}
}

func TestFindEnvd(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "airlock-envd")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := findEnvd(p); err != nil || got != p {
		t.Fatalf("explicit: %q %v", got, err)
	}
	if _, err := findEnvd(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing explicit path accepted")
	}
	t.Setenv("PATH", dir)
	if got, err := findEnvd(""); err != nil || got != p {
		t.Fatalf("from PATH: %q %v", got, err)
	}
}

func TestEgressDenyOut(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	deny, except, err := Egress{}.denyOut(log)
	if err != nil || !slices.Equal(deny, network.DefaultDenyOut) || len(except) != 0 {
		t.Errorf("no flags: %v %v %v; want the defaults", deny, except, err)
	}
	deny, _, err = Egress{DenyOut: []string{}}.denyOut(log)
	if err != nil || deny == nil || len(deny) != 0 {
		t.Errorf("--deny-out '': %v %v; want an empty, non-nil list", deny, err)
	}
	deny, except, err = Egress{DenyOut: []string{"10.0.0.0/8"}, DenyOutExcept: []string{"10.1.2.3", "203.0.113.0/24", "169.254.169.254"}}.denyOut(log)
	if err != nil || len(deny) != 1 || len(except) != 3 {
		t.Fatalf("%v %v %v", deny, except, err)
	}
	for _, w := range []string{"outside every --deny-out range", "entry=203.0.113.0/24", "it stays blocked there", "blocked=169.254.0.0/16"} {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("log lacks %q:\n%s", w, buf.String())
		}
	}
	if _, _, err := (Egress{DenyOutExcept: []string{"10.0.0.0/40"}}).denyOut(log); err == nil || !strings.Contains(err.Error(), "--deny-out-except") {
		t.Errorf("bad exception: %v", err)
	}
}
