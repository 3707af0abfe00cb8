//go:build e2e

package gohttp

// The kill's network cut (issue 24): a kill cuts the sandbox off with an
// nftables set and leaves the veth (whose deletion waits on the kernel's
// rtnl lock, seconds on a busy host) to the background teardown; once that
// teardown finished, the slot's address serves a new sandbox.

import (
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// hostVeth returns the host veth whose peer is in sandbox id's namespace.
func hostVeth(t *testing.T, id string) string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.Contains(line, " link-netns "+netnsPrefix()+id) {
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			return name
		}
	}
	t.Fatalf("no host veth with its peer in %s", netnsPrefix()+id)
	return ""
}

func linkExists(name string) bool {
	return exec.Command("ip", "link", "show", "dev", name).Run() == nil
}

// cutSet lists the daemon's set of cut-off veths.
func cutSet(t *testing.T) string {
	t.Helper()
	table := strings.TrimSuffix(netnsPrefix(), "-")
	out, err := exec.Command("nft", "list", "set", "inet", table, "cut_ifaces").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list set inet %s cut_ifaces: %v %s", table, err, out)
	}
	return string(out)
}

// The background teardown is held (a file in the sandbox's directory made
// immutable, so destroying the runtime instance fails and is retried, and
// the veth deletion that follows it waits): the kill still answers with the
// sandbox stopped and unreachable, its veth still there but cut. Once the
// teardown finished, the veth is gone and uncut, and the slot's address,
// given to a new sandbox, answers.
func TestKillCutsWithoutDeletingTheVeth(t *testing.T) {
	e := loadEnv(t)
	s := e.createV1(t, 300, nil)
	ip := guestAddr(t, s.SandboxID)
	veth := hostVeth(t, s.SandboxID)
	if !answers(ip, envdPort) {
		t.Fatalf("the agent does not answer on %s:%s before the kill", ip, envdPort)
	}
	_, unpin := pinTeardown(t, s.SandboxID)

	status, took := e.killTimed(t, s.SandboxID)
	if status != http.StatusNoContent {
		t.Fatalf("DELETE: %d, want 204", status)
	}
	t.Logf("kill answered in %v", took)
	e.requireGone(t, s.SandboxID)
	if left := notKilled(s.SandboxID); len(left) > 0 {
		t.Errorf("processes of the sandbox alive without SIGKILL when the kill answered: %v", left)
	}
	if answers(ip, envdPort) {
		t.Errorf("%s:%s still answers after the kill", ip, envdPort)
	}
	// The teardown is held: the kill did not wait for the veth to go.
	time.Sleep(time.Second)
	if !linkExists(veth) {
		t.Errorf("veth %s deleted by the kill; want it left to the background teardown", veth)
	}
	if set := cutSet(t); !strings.Contains(set, `"`+veth+`"`) {
		t.Errorf("veth %s not in the cut set while its teardown is held:\n%s", veth, set)
	}
	if answers(ip, envdPort) {
		t.Errorf("%s:%s answers while the teardown is held", ip, envdPort)
	}

	unpin()
	var what string
	if !waitFor(2*time.Minute, 250*time.Millisecond, func() (ok bool) { ok, what = teardownDone(t, s.SandboxID); return ok }) {
		t.Fatalf("teardown not finished 2 min after the unpin: %s left", what)
	}
	if linkExists(veth) {
		t.Errorf("veth %s still there after the teardown", veth)
	}
	if set := cutSet(t); strings.Contains(set, `"`+veth+`"`) {
		t.Errorf("veth %s still cut after its teardown:\n%s", veth, set)
	}

	// The lowest free slot is handed out first: a new sandbox gets the
	// address back (a few tries, in case a pool refill took it) and answers.
	for i := 0; i < 3; i++ {
		n := e.createV1(t, 300, nil)
		if guestAddr(t, n.SandboxID) != ip {
			continue
		}
		if hostVeth(t, n.SandboxID) != veth {
			t.Errorf("address %s reused behind veth %s, want %s", ip, hostVeth(t, n.SandboxID), veth)
		}
		if !answers(ip, envdPort) {
			t.Fatalf("the new sandbox on the reused address %s does not answer", ip)
		}
		if r := e.run(t, n, "", "echo reused", time.Minute); r.stdout != "reused\n" {
			t.Fatalf("command in the sandbox on the reused address: %+v", r)
		}
		return
	}
	t.Errorf("no new sandbox got the freed address %s in 3 creates", ip)
}
