package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/egressproxy"
	"github.com/airlock-sandbox/airlock/internal/network"
)

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

// TestRunRefusesBadUpstreamCA: a daemon with an --egress-proxy-upstream-ca
// it cannot use refuses to start, naming the flag and the file (it used to
// start and refuse every create with network rules with 503).
func TestRunRefusesBadUpstreamCA(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not-a-ca.pem")
	if err := os.WriteFile(notPEM, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"missing", filepath.Join(dir, "missing.pem"), "no such file or directory"},
		{"not PEM", notPEM, "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // nothing may start
			err := Run(ctx, Config{LogLevel: "error", LogFormat: "text", Subnet: "10.130.0.0/16", NetPrefix: "koe", DataDir: filepath.Join(dir, "data"),
				EnvdPath: filepath.Join(dir, "no-envd"), Egress: Egress{ProxyUpstreamCA: tc.file}})
			if err == nil {
				t.Fatal("Run started with a bad --egress-proxy-upstream-ca")
			}
			for _, w := range []string{"--egress-proxy-upstream-ca", tc.file, tc.want} {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Run's error %q does not say %q", err, w)
				}
			}
		})
	}
	good := filepath.Join(dir, "ca.pem")
	ca, err := egressproxy.NewCA("koe")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (Egress{ProxyUpstreamCA: good}).upstreamRoots(); err != nil {
		t.Fatalf("a good CA file refused: %v", err)
	}
}
