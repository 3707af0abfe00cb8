//go:build e2e

package gohttp

// A node given an --egress-proxy-upstream-ca it cannot use (issue 29, "bad
// input"): a file that is missing, or that holds no PEM certificate. The
// daemon refuses to start, naming the flag and the file (it used to start
// with its egress proxy down, refusing every create with network.rules
// with 503: an operator's mistake found only by the first user of rules).
// The 503 of a node whose proxy did not start for another reason is
// internal/sandbox's TestNetworkRulesRefusedWithoutEgressProxy.

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSecretsProxyCannotStart(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "not-a-ca.pem")
	if err := os.WriteFile(notPEM, []byte("-----BEGIN NOTHING-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, file, why string }{
		{"missing file", filepath.Join(t.TempDir(), "no-such-upstream-ca.pem"), "no such file or directory"},
		{"no PEM certificate", notPEM, "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Its own prefix ("y" + the suite's) and the /24 below the
			// disk-full daemon's (the warm-pool test's, which does not run
			// at the same time), should it start after all.
			d := startSecondDaemon(t, secondDaemonOpts{Name: "proxydown", Templates: []string{"base"}, Letter: "y", Below: 1,
				Args: []string{"--templates", "base", "--dns-upstream", "192.0.2.53", "--egress-proxy-upstream-ca", tc.file}})
			if !d.exited(60 * time.Second) {
				t.Fatalf("the daemon still runs 60 s after start with a bad --egress-proxy-upstream-ca (healthy: %v)", healthy(d.apiURL))
			}
			var ee *exec.ExitError
			if !errors.As(d.err, &ee) || ee.ExitCode() == 0 {
				t.Fatalf("the daemon exited with %v; want a failure", d.err)
			}
			out := d.log()
			for _, want := range []string{"--egress-proxy-upstream-ca", tc.file, tc.why} {
				if !strings.Contains(out, want) {
					t.Errorf("the daemon's output does not say %q:\n%s", want, tail(out, 20))
				}
			}
		})
	}
}
