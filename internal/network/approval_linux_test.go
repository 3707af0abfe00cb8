//go:build linux

package network

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables/expr"

	"github.com/airlock-sandbox/airlock/internal/approval"
)

// Approval root test: own prefix, pool, outside namespace and queue number
// (approve28's values), so it runs next to other daemons and tests.
const (
	apExtNS   = "xqz28a-ext"
	apExtIf   = "xqz28a0"
	apExtHost = "10.95.41.1"
	apExtA    = "10.95.41.2" // allowOut
	apExtB    = "10.95.41.3" // allowed once, after a wait
	apExtC    = "10.95.41.4" // denied
	apExtD    = "10.95.41.5" // allowed, remembered
	apExtE    = "10.95.41.6" // no answer
	apExtG    = "10.95.41.7" // denyOut (specific): never asked
	apRoute   = "10.95.41.0/29"
	apQueue   = 3301
)

// This run's own prefix and pool (runnames_linux_test.go).
var (
	apPrefix = runPrefix("ap")
	apSubnet = runSubnet(6)
)

func TestHoldRules(t *testing.T) {
	f := &firewall{}
	e := Egress{Allow: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32")},
		Deny: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("192.0.2.0/24")}, Hold: true}
	rules := f.egressRules(e)
	if len(rules) != 2 {
		t.Fatalf("with a hold: %d allow/deny rules before the hold, want 2 (the catch-all deny after it)", len(rules))
	}
	hold := f.holdRules("qz28a00001", 3301)
	var queued bool
	for _, r := range hold {
		if tg, ok := r[len(r)-1].(*expr.Target); ok {
			queued = tg.Name == "NFQUEUE" && tg.Rev == 1
		}
	}
	if !queued {
		t.Fatalf("hold rules have no NFQUEUE target: %#v", hold)
	}
	last := hold[len(hold)-1]
	if v, ok := last[len(last)-1].(*expr.Verdict); !ok || v.Kind != expr.VerdictDrop {
		t.Fatalf("hold rules end with %#v, want a TCP drop", last[len(last)-1])
	}
}

func dialHeld(path, addr string) (time.Duration, error) {
	start := time.Now()
	var c net.Conn
	err := inNS(path, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	})
	if err != nil {
		return time.Since(start), err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		return time.Since(start), err
	}
	return time.Since(start), nil
}

func TestApprovalHold(t *testing.T) {
	needRoot(t)
	ctx := testCtx(t)
	_ = exec.Command("nft", "delete", "table", "inet", apPrefix).Run()
	broker := approval.NewBroker(approval.Options{})
	var mu sync.Mutex
	var decided []approval.Answer
	cfg := Config{Subnet: netip.MustParsePrefix(apSubnet), NamePrefix: apPrefix,
		DenyOutExcept: []netip.Prefix{netip.MustParsePrefix(apRoute)},
		ApprovalConfig: ApprovalConfig{ApprovalQueue: apQueue, Approver: broker,
			ApprovalObserver: func(_ string, a approval.Answer) { mu.Lock(); decided = append(decided, a); mu.Unlock() }}}
	m, err := NewManager(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	cleanupAll(t, m)
	t.Cleanup(func() {
		cleanupAll(t, m)
		if err := m.Close(context.Background(), true); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	ext := makeOutsideNS(t, apExtNS, apExtIf, []string{apExtHost + "/29"},
		[]string{apExtA + "/29", apExtB + "/29", apExtC + "/29", apExtD + "/29", apExtE + "/29", apExtG + "/29"})
	addr := map[string]string{}
	for _, a := range []string{apExtA, apExtB, apExtC, apExtD, apExtE, apExtG} {
		addr[a] = net.JoinHostPort(a, port(listenIn(t, ext, net.JoinHostPort(a, "0"))))
	}
	e, err := ParseEgress([]string{apExtA}, []string{"0.0.0.0/0", apExtG})
	if err != nil {
		t.Fatal(err)
	}
	e.Hold = true
	const id = "ap-a"
	broker.Set(id, &approval.Config{Stream: true, TimeoutMs: 400})
	ep, err := m.Setup(ctx, id, 1, Options{AllowInternet: true, Egress: e})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Teardown(context.Background(), id, 1) })

	// The stream client: B allowed once after 300 ms, C denied, D allowed
	// and remembered, E never answered.
	s := broker.Listen(id)
	defer broker.Unlisten(s)
	asked := map[string]int{}
	go func() {
		for q := range s.C {
			mu.Lock()
			asked[q.Address]++
			mu.Unlock()
			switch q.Address {
			case apExtB:
				time.Sleep(300 * time.Millisecond)
				_ = broker.Answer(id, q.DecisionID, approval.Decision{Decision: "allow"})
			case apExtC:
				_ = broker.Answer(id, q.DecisionID, approval.Decision{Decision: "deny"})
			case apExtD:
				_ = broker.Answer(id, q.DecisionID, approval.Decision{Decision: "allow", Remember: "sandbox"})
			}
		}
	}()
	askedOf := func(a string) int { mu.Lock(); defer mu.Unlock(); return asked[a] }

	if el, err := dialHeld(ep.NetNSPath, addr[apExtA]); err != nil || askedOf(apExtA) != 0 {
		t.Fatalf("allowOut A: %v after %v, asked %d times; want reached, never asked", err, el, askedOf(apExtA))
	}
	if el, err := dialHeld(ep.NetNSPath, addr[apExtB]); err != nil || el < 300*time.Millisecond || askedOf(apExtB) != 1 {
		t.Fatalf("B: %v after %v, asked %d; want reached after the hook's 300 ms, asked once", err, el, askedOf(apExtB))
	} else {
		t.Logf("B held then allowed: %v", el)
	}
	time.Sleep(allowOnceFor + 500*time.Millisecond) // "once" covers the SYN retransmits of allowOnceFor
	if _, err := dialHeld(ep.NetNSPath, addr[apExtB]); err != nil || askedOf(apExtB) != 2 {
		t.Fatalf("B again: %v, asked %d; want asked again (allowed once)", err, askedOf(apExtB))
	}
	el, err := dialHeld(ep.NetNSPath, addr[apExtC])
	if !errors.Is(err, syscall.ECONNREFUSED) || el > time.Second {
		t.Fatalf("C denied: %v after %v; want connection refused, fast", err, el)
	}
	t.Logf("C denied: refused after %v", el)
	if _, err := dialHeld(ep.NetNSPath, addr[apExtD]); err != nil {
		t.Fatalf("D: %v", err)
	}
	if _, err := dialHeld(ep.NetNSPath, addr[apExtD]); err != nil || askedOf(apExtD) != 1 {
		t.Fatalf("D again: %v, asked %d; want reached without asking (remembered)", err, askedOf(apExtD))
	}
	el, err = dialHeld(ep.NetNSPath, addr[apExtE])
	if !errors.Is(err, syscall.ECONNREFUSED) || el < 400*time.Millisecond || el > 2*time.Second {
		t.Fatalf("E unanswered: %v after %v; want refused after the 400 ms deadline", err, el)
	}
	t.Logf("E timed out: refused after %v", el)
	if _, err := dialHeld(ep.NetNSPath, addr[apExtG]); err == nil || askedOf(apExtG) != 0 {
		t.Fatalf("G (denyOut): %v, asked %d; want blocked, never asked", err, askedOf(apExtG))
	}
	var log []string
	for _, en := range m.EgressLog(id, 0) {
		if en.Kind == KindApproval {
			log = append(log, en.Dst.String()+" "+en.Decision+" "+en.Rule)
		}
	}
	text := strings.Join(log, "\n")
	for _, want := range []string{apExtB + " allowed approval by stream", apExtC + " denied approval by stream", apExtE + " denied approval by timeout"} {
		if !strings.Contains(text, want) {
			t.Errorf("audit log lacks %q:\n%s", want, text)
		}
	}
	mu.Lock()
	n := len(decided)
	mu.Unlock()
	if n < 5 {
		t.Errorf("observer saw %d decisions, want at least 5", n)
	}

	// Without the hook the chain and the sets go.
	e.Hold = false
	if err := m.SetPolicy(ctx, id, 1, Options{AllowInternet: true, Egress: e}); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("nft", "list", "table", "inet", apPrefix).CombinedOutput()
	if strings.Contains(string(out), approvedSetPrefix+ep.HostIf) || strings.Contains(string(out), "NFQUEUE") {
		t.Errorf("hold left after it was turned off:\n%s", out)
	}
}
