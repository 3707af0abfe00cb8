//go:build linux

package network

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/approval"
	"github.com/airlock-sandbox/airlock/internal/audit"
)

// askRecorder is an Approver that allows one address and records what it
// is asked.
type askRecorder struct {
	mu    sync.Mutex
	asked []approval.Dest
	allow netip.Addr
}

func (a *askRecorder) Ask(_ context.Context, _ string, d approval.Dest) approval.Answer {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, d)
	var ans approval.Answer
	ans.Allow = d.Addr == a.allow
	ans.By = approval.ByWebhook
	return ans
}

// TestApproveRelayed: the relay's question for a sandbox with an
// egressProxy and a hook. No hold, an allowOut address, an address an
// allowed domain resolved to: yes without asking. Others: the hook's
// answer, with the name the sandbox resolved, recorded in the audit log.
// Forgetting the hold (policy change, teardown) stops the asking.
func TestApproveRelayed(t *testing.T) {
	ap := &askRecorder{allow: netip.MustParseAddr("203.0.113.7")}
	m := &Manager{cfg: Config{ApprovalConfig: ApprovalConfig{Approver: ap}}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		audit: audit.NewBook(10, nil), ifaces: map[string]string{}, learned: map[string]map[netip.Addr]string{}, relayHold: map[string]relayHold{}}
	ctx := context.Background()
	dst := func(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

	if !m.ApproveRelayed(ctx, "sb", dst("198.51.100.1:443")) || len(ap.asked) != 0 {
		t.Fatalf("no hold: want allowed without asking (asked %v)", ap.asked)
	}
	m.noteRelayHold("sb", "kmbx0001", Egress{Hold: true, Relayed: false})
	if !m.ApproveRelayed(ctx, "sb", dst("198.51.100.1:443")) || len(ap.asked) != 0 {
		t.Fatalf("a hold in the kernel (not relayed): want the relay not to ask (asked %v)", ap.asked)
	}
	m.noteRelayHold("sb", "kmbx0001", Egress{Hold: true, Relayed: true, Allow: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}})
	m.noteLearned("kmbx0001", "ok.example", []netip.Addr{netip.MustParseAddr("198.51.100.9")})
	m.names.note("sb", "asked.example", []netip.Addr{netip.MustParseAddr("203.0.113.7")})
	for _, d := range []string{"192.0.2.5:80", "198.51.100.9:443"} {
		if !m.ApproveRelayed(ctx, "sb", dst(d)) {
			t.Errorf("%s (allowOut / allowed domain): refused", d)
		}
	}
	if len(ap.asked) != 0 {
		t.Fatalf("asked about already-allowed destinations: %v", ap.asked)
	}
	if !m.ApproveRelayed(ctx, "sb", dst("203.0.113.7:443")) {
		t.Error("203.0.113.7: the hook allowed it, the relay refused")
	}
	if m.ApproveRelayed(ctx, "sb", dst("203.0.113.8:80")) {
		t.Error("203.0.113.8: the hook denied it, the relay allowed")
	}
	want := []approval.Dest{{Protocol: "tcp", Addr: netip.MustParseAddr("203.0.113.7"), Port: 443, Domain: "asked.example"},
		{Protocol: "tcp", Addr: netip.MustParseAddr("203.0.113.8"), Port: 80}}
	if len(ap.asked) != 2 || ap.asked[0] != want[0] || ap.asked[1] != want[1] {
		t.Errorf("asked %+v, want %+v", ap.asked, want)
	}
	log := m.audit.Last("sb", 0)
	if len(log) != 2 || log[0].Kind != KindApproval || log[0].Decision != audit.Allowed || log[1].Decision != audit.Denied ||
		log[1].Dst != want[1].Addr || log[1].Port != 80 {
		t.Errorf("audit log %+v, want the two decisions", log)
	}
	m.noteRelayHold("sb", "kmbx0001", Egress{})
	if !m.ApproveRelayed(ctx, "sb", dst("203.0.113.8:80")) || len(ap.asked) != 2 {
		t.Errorf("after the hold is forgotten: want allowed without asking")
	}
}
