//go:build e2e

package gohttp

import (
	"os/exec"
	"strings"
	"testing"
)

// extNS makes network namespace ns, joined to the host by a veth pair:
// hostIf on the host with hostAddr (a CIDR), nsIf inside, both up, and the
// namespace's lo up; the test's cleanup removes them. It returns a runner
// of `ip` commands that fails t, for the test's own addresses and routes.
func extNS(t *testing.T, ns, hostIf, nsIf, hostAddr string) func(args ...string) {
	t.Helper()
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", hostIf).Run()
		_ = exec.Command("ip", "netns", "del", ns).Run()
	})
	ip("link", "add", hostIf, "type", "veth", "peer", "name", nsIf)
	ip("link", "set", nsIf, "netns", ns)
	ip("addr", "add", hostAddr, "dev", hostIf)
	ip("link", "set", hostIf, "up")
	ip("-n", ns, "link", "set", nsIf, "up")
	ip("-n", ns, "link", "set", "lo", "up")
	return ip
}
