//go:build linux

package network

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ti-mo/conntrack"

	"github.com/airlock-sandbox/airlock/internal/audit"
)

func ctFlow(proto uint8, src, dst, replySrc string, dport uint16) *conntrack.Flow {
	f := &conntrack.Flow{}
	f.TupleOrig.IP.SourceAddress = netip.MustParseAddr(src)
	f.TupleOrig.IP.DestinationAddress = netip.MustParseAddr(dst)
	f.TupleOrig.Proto.Protocol = proto
	f.TupleOrig.Proto.SourcePort = 40000
	f.TupleOrig.Proto.DestinationPort = dport
	f.TupleReply.IP.SourceAddress = netip.MustParseAddr(replySrc)
	f.CountersOrig = conntrack.Counter{Packets: 3, Bytes: 180}
	f.CountersReply = conntrack.Counter{Direction: true, Packets: 5, Bytes: 9000}
	return f
}

// TestFlowEndOf: which conntrack flows are a sandbox's egress, and of which
// slot.
func TestFlowEndOf(t *testing.T) {
	subnet := netip.MustParsePrefix("10.77.0.0/16")
	start := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		f    *conntrack.Flow
		slot int
		ok   bool
	}{
		{"masqueraded tcp of slot 0", ctFlow(6, "10.77.0.2", "93.184.216.34", "93.184.216.34", 443), 0, true},
		{"slot 5", ctFlow(6, "10.77.0.22", "1.1.1.1", "1.1.1.1", 80), 5, true},
		{"slot 300", ctFlow(17, "10.77.4.178", "1.1.1.1", "1.1.1.1", 123), 300, true},
		{"DNATed to the relay (host side): the original destination", ctFlow(6, "10.77.0.22", "1.1.1.1", "10.77.0.21", 443), 5, true},
		{"DNS redirected to the filter", ctFlow(17, "10.77.0.22", "8.8.8.8", "10.77.0.21", 53), 0, false},
		{"DNS sent out directly", ctFlow(17, "10.77.0.22", "8.8.8.8", "8.8.8.8", 53), 5, true},
		{"from a host-side address (the daemon)", ctFlow(6, "10.77.0.21", "1.1.1.1", "1.1.1.1", 80), 0, false},
		{"daemon to a guest", ctFlow(6, "10.77.0.21", "10.77.0.22", "10.77.0.22", 49983), 0, false},
		{"to the pool", ctFlow(6, "10.77.0.22", "10.77.0.5", "10.77.0.5", 80), 0, false},
		{"not the pool", ctFlow(6, "192.168.1.2", "1.1.1.1", "1.1.1.1", 80), 0, false},
		{"volume server", ctFlow(6, "10.77.0.22", VolumeServerAddr.String(), "10.77.0.21", VolumeGuestPort), 0, false},
		{"IPv6", ctFlow(6, "fd00::2", "2001:db8::1", "2001:db8::1", 80), 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.Timestamp = conntrack.Timestamp{Start: start, Stop: start.Add(1500 * time.Millisecond)}
			slot, e, ok := flowEndOf(subnet, tc.f)
			if ok != tc.ok || (ok && slot != tc.slot) {
				t.Fatalf("flowEndOf = slot %d, %v; want slot %d, %v", slot, ok, tc.slot, tc.ok)
			}
			if !ok {
				return
			}
			want := audit.FlowEnd{Time: start.Add(1500 * time.Millisecond), Protocol: protoName(tc.f.TupleOrig.Proto.Protocol),
				Dst: tc.f.TupleOrig.IP.DestinationAddress, Port: tc.f.TupleOrig.Proto.DestinationPort,
				BytesOut: 180, BytesIn: 9000, PacketsOut: 3, PacketsIn: 5, Duration: 1500 * time.Millisecond}
			if e != want {
				t.Errorf("flowEndOf = %+v, want %+v", e, want)
			}
		})
	}
	// ICMP has no port; no timestamps, no duration.
	f := ctFlow(1, "10.77.0.2", "1.1.1.1", "1.1.1.1", 0)
	if _, e, ok := flowEndOf(subnet, f); !ok || e.Protocol != "icmp" || e.Port != 0 || e.Duration != 0 || e.Time.IsZero() {
		t.Errorf("icmp: %+v, %v", e, ok)
	}
}

// endRecorder is an audit observer that keeps ended flows.
type endRecorder struct {
	mu   sync.Mutex
	ends map[string][]audit.FlowEnd
}

func (r *endRecorder) Egress(string, audit.Entry) {}
func (r *endRecorder) Drop(string)                {}
func (r *endRecorder) EgressEnd(id string, f audit.FlowEnd) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ends[id] = append(r.ends[id], f)
}

func (r *endRecorder) of(id string) []audit.FlowEnd {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]audit.FlowEnd(nil), r.ends[id]...)
}

// Names of TestFlowEnds (own prefix, pool, outside and NFLOG group: never a
// daemon's or another test's).
const (
	ceExtNS   = "xkmbce-ext"
	ceExtIf   = "xkmbce0"
	ceExtHost = "10.108.250.1"
	ceExtIP   = "10.108.250.2"
	ceGroup   = 3511
)

// This run's own prefix and pool (runnames_linux_test.go).
var (
	cePrefix = runPrefix("ce")
	ceSubnet = runSubnet(7)
)

// TestFlowEnds: a real sandbox network downloads n bytes from a server in
// an outside namespace; the manager reports the flow's end from conntrack
// with bytesIn >= n, as soon as the connection closes (not 2 minutes later
// when conntrack forgets it).
func TestFlowEnds(t *testing.T) {
	needRoot(t)
	rec := &endRecorder{ends: map[string][]audit.FlowEnd{}}
	cfg := Config{Subnet: netip.MustParsePrefix(ceSubnet), NamePrefix: cePrefix, AuditGroup: ceGroup, AuditObserver: rec,
		DenyOutExcept: []netip.Prefix{netip.MustParsePrefix(ceExtIP + "/32")}}
	m, err := NewManager(testCtx(t), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	if m.ends == nil {
		t.Fatal("the conntrack reader did not start")
	}
	ext := makeOutsideNS(t, ceExtNS, ceExtIf, []string{ceExtHost + "/30"}, []string{ceExtIP + "/30"})
	ep := setup(t, m, "ce-a", 3, true)

	download := func(round string) {
		t.Helper()
		const n = 300_000
		var l net.Listener
		if err := inNS(ext, func() (err error) { l, err = net.Listen("tcp", net.JoinHostPort(ceExtIP, "0")); return err }); err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write(make([]byte, n))
			_ = c.Close()
		}()
		var got int64
		err := inNS(ep.NetNSPath, func() error {
			c, err := net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			got, err = io.Copy(io.Discard, c)
			return err
		})
		if err != nil || got != n {
			t.Fatalf("%s: download: %d bytes, %v; want %d", round, got, err, n)
		}
		lport, _ := strconv.Atoi(port(l))
		deadline := time.Now().Add(30 * time.Second)
		for {
			for _, e := range rec.of("ce-a") {
				if e.Dst.String() == ceExtIP && int(e.Port) == lport {
					t.Logf("%s: egress.end: %+v", round, e)
					if e.Protocol != "tcp" || e.BytesIn < n || e.PacketsIn == 0 || e.PacketsOut == 0 || e.BytesOut == 0 {
						t.Errorf("%s: ended flow %+v: want tcp with bytesIn >= %d and packets both ways", round, e, n)
					}
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no ended flow to %s:%d within 30 s; got %+v", round, ceExtIP, lport, rec.of("ce-a"))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	download("first listener")
	// A listener whose worker stopped is replaced (what the reader does
	// when ti-mo/conntrack reports an error): ended flows still arrive.
	old := m.ends.lis.current()
	if m.ends.relisten() == nil || m.ends.lis.current() == old {
		t.Fatal("relisten did not open a new listener")
	}
	download("after relisten")
}
