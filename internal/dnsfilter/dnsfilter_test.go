package dnsfilter

import (
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// upstream runs a resolver on loopback answering a few names.
func upstream(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	answers := map[string]string{"allowed.test.": "192.0.2.1", "a.x.test.": "192.0.2.3", "other.test.": "192.0.2.4"}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg).SetReply(r)
		if ip, ok := answers[strings.ToLower(r.Question[0].Name)]; ok && r.Question[0].Qtype == dns.TypeA {
			rr, _ := dns.NewRR(r.Question[0].Name + " 30 IN A " + ip)
			m.Answer = append(m.Answer, rr)
		} else if !ok {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

// freePort returns a loopback port that is free for both UDP and TCP (the
// filter listens on both): a UDP port alone may be some TCP connection's
// ephemeral port on a busy host.
func freePort(t *testing.T) uint16 {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		l.Close()
		if err != nil {
			continue
		}
		pc.Close()
		return uint16(port)
	}
	t.Fatal("no loopback port free for both UDP and TCP")
	return 0
}

func query(t *testing.T, netw, server, name string) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: netw, Timeout: 3 * time.Second}
	r, _, err := c.Exchange(new(dns.Msg).SetQuestion(dns.Fqdn(name), dns.TypeA), server)
	if err != nil {
		t.Fatalf("query %s over %s: %v", name, netw, err)
	}
	return r
}

func TestFilter(t *testing.T) {
	up := upstream(t)
	port := freePort(t)
	f, err := New(Config{Upstreams: []string{up}, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)

	var mu sync.Mutex
	var learned []netip.Addr
	var ttls []time.Duration
	var events []Event
	decide := func(name string) Decision {
		switch {
		case name == "allowed.test" || strings.HasSuffix(name, ".x.test"):
			return Decision{Allow: true, Learn: true, Rule: "allowOut"}
		case name == "other.test":
			return Decision{Allow: true, Rule: "default"}
		}
		return Decision{Rule: "not in allowOut"}
	}
	sb := Sandbox{
		ID: "sb1", Listen: netip.MustParseAddr("127.0.0.1"), Client: netip.MustParseAddr("127.0.0.1"),
		Decide: decide,
		Learn: func(_ string, a []netip.Addr, ttl time.Duration) error {
			mu.Lock()
			defer mu.Unlock()
			learned = append(learned, a...)
			ttls = append(ttls, ttl)
			return nil
		},
		Record: func(e Event) { mu.Lock(); events = append(events, e); mu.Unlock() },
	}
	if err := f.Start(sb); err != nil {
		t.Fatal(err)
	}
	server := netip.AddrPortFrom(sb.Listen, port).String()

	r := query(t, "udp", server, "Allowed.Test")
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
		t.Fatalf("allowed.test: %v", r)
	}
	if r := query(t, "tcp", server, "a.x.test"); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("a.x.test over tcp: %v", r)
	}
	if r := query(t, "udp", server, "denied.test"); r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
		t.Fatalf("denied.test: rcode %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
	if r := query(t, "udp", server, "other.test"); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("other.test: %v", r)
	}
	mu.Lock()
	if got := addrsString(learned); got != "192.0.2.1,192.0.2.3" {
		t.Errorf("learned %s, want 192.0.2.1,192.0.2.3 (other.test resolves but is not learned)", got)
	}
	if len(ttls) != 2 || ttls[0] != 30*time.Second {
		t.Errorf("ttls %v, want 30s each", ttls)
	}
	if len(events) != 4 || !events[0].Allowed || events[0].Name != "allowed.test" || events[2].Allowed ||
		events[2].Rule != "not in allowOut" || events[2].Rcode != "REFUSED" || addrsString(events[0].Answers) != "192.0.2.1" {
		t.Errorf("events %+v", events)
	}
	mu.Unlock()

	// A live policy change takes effect on the next query.
	sb.Decide = func(string) Decision { return Decision{Rule: "deny all"} }
	if err := f.Start(sb); err != nil {
		t.Fatal(err)
	}
	if r := query(t, "udp", server, "allowed.test"); r.Rcode != dns.RcodeRefused {
		t.Errorf("after the change: rcode %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}

	// Queries from an address other than the sandbox's are refused.
	other := Sandbox{ID: "sb2", Listen: netip.MustParseAddr("127.0.0.2"), Client: netip.MustParseAddr("127.0.0.9"), Decide: decide}
	if err := f.Start(other); err != nil {
		t.Fatal(err)
	}
	if r := query(t, "udp", netip.AddrPortFrom(other.Listen, port).String(), "allowed.test"); r.Rcode != dns.RcodeRefused {
		t.Errorf("foreign client: rcode %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
	f.Stop("sb2")
	if f.Running("sb2") || !f.Running("sb1") {
		t.Error("Stop stopped the wrong resolver")
	}
}

func TestUpstreamFailure(t *testing.T) {
	// Nothing listens on the upstream: SERVFAIL, quickly enough.
	port := freePort(t)
	f, err := New(Config{Upstreams: []string{netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), freePort(t)).String()}, Port: port, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	sb := Sandbox{ID: "s", Listen: netip.MustParseAddr("127.0.0.1"), Client: netip.MustParseAddr("127.0.0.1"),
		Decide: func(string) Decision { return Decision{Allow: true} }}
	if err := f.Start(sb); err != nil {
		t.Fatal(err)
	}
	if r := query(t, "udp", netip.AddrPortFrom(sb.Listen, port).String(), "a.test"); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("rcode %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
}

func TestNew(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("no upstreams accepted")
	}
	if _, err := New(Config{Upstreams: []string{"resolver.example"}}); err == nil {
		t.Error("a name as upstream accepted")
	}
	f, err := New(Config{Upstreams: []string{"192.0.2.53", "192.0.2.54:5353"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.Upstreams(), ","); got != "192.0.2.53:53,192.0.2.54:5353" {
		t.Errorf("Upstreams = %s", got)
	}
}

func TestHostResolvers(t *testing.T) {
	p := t.TempDir() + "/resolv.conf"
	writeFile(t, p, "# c\nnameserver 127.0.0.53\nnameserver 192.0.2.1\nsearch x\nnameserver ::1\nnameserver junk\n")
	if got := strings.Join(HostResolvers(p), ","); got != "127.0.0.53,192.0.2.1" {
		t.Errorf("HostResolvers = %s, want 127.0.0.53,192.0.2.1 (IPv4 only)", got)
	}
	if got := HostResolvers(p + ".missing"); got != nil {
		t.Errorf("missing file: %v", got)
	}
}

func addrsString(as []netip.Addr) string {
	var s []string
	for _, a := range as {
		s = append(s, a.String())
	}
	return strings.Join(s, ",")
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestInFlightLimit(t *testing.T) {
	// An upstream that answers only when released: the third concurrent
	// query of a sandbox limited to two gets SERVFAIL at once.
	release := make(chan struct{})
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		<-release
		_ = w.WriteMsg(new(dns.Msg).SetReply(r))
	})}
	go func() { _ = up.ActivateAndServe() }()
	t.Cleanup(func() { _ = up.Shutdown() })
	port := freePort(t)
	f, err := New(Config{Upstreams: []string{pc.LocalAddr().String()}, Port: port, MaxInFlight: 2, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	lo := netip.MustParseAddr("127.0.0.1")
	if err := f.Start(Sandbox{ID: "s", Listen: lo, Client: lo, Decide: func(string) Decision { return Decision{Allow: true} }}); err != nil {
		t.Fatal(err)
	}
	server := netip.AddrPortFrom(lo, port).String()
	done := make(chan int, 2)
	for i := 0; i < 2; i++ {
		go func() {
			c := &dns.Client{Net: "udp", Timeout: 10 * time.Second}
			r, _, err := c.Exchange(new(dns.Msg).SetQuestion("slow.test.", dns.TypeA), server)
			if err != nil {
				done <- -1
				return
			}
			done <- r.Rcode
		}()
	}
	// Wait until both hold a slot, then the third is turned away.
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		n := len(f.servers["s"].slots)
		f.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d queries in flight", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := query(t, "udp", server, "third.test"); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("third query: rcode %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
	close(release)
	for i := 0; i < 2; i++ {
		if rc := <-done; rc != dns.RcodeSuccess {
			t.Errorf("held query ended with %d", rc)
		}
	}
}
