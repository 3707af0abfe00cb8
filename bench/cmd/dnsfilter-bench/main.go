// Command dnsfilter-bench measures what the DNS filter of domain rules adds
// to a lookup: the same A query sent straight to a resolver (the baseline)
// and through internal/dnsfilter — refused by policy, forwarded, and
// forwarded + learned, i.e. the answer added to an nftables timeout set
// before it is returned, as for a sandbox's allowOut name (needs root; its
// own table "inet albench4", removed at the end). Everything runs on
// loopback: no traffic leaves the host.
//
// Usage: go run ./bench/cmd/dnsfilter-bench [-n 2000]
package main

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/internal/dnsfilter"
)

func main() {
	n := flag.Int("n", 2000, "queries per case")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "dnsfilter-bench:", err)
		os.Exit(1)
	}
}

func run(n int) error {
	upstream, stop, err := startUpstream()
	if err != nil {
		return err
	}
	defer stop()
	port, err := freePort()
	if err != nil {
		return err
	}
	f, err := dnsfilter.New(dnsfilter.Config{Upstreams: []string{upstream}, Port: port})
	if err != nil {
		return err
	}
	defer f.Close()
	lo := netip.MustParseAddr("127.0.0.1")
	learn := func(string, []netip.Addr, time.Duration) error { return nil }
	var set *nftSet
	if os.Geteuid() == 0 {
		if set, err = newNftSet(); err != nil {
			return err
		}
		defer set.remove()
		learn = func(_ string, addrs []netip.Addr, ttl time.Duration) error { return set.add(addrs, ttl) }
	}
	err = f.Start(dnsfilter.Sandbox{ID: "bench", Listen: lo, Client: lo, Learn: learn,
		Decide: func(name string) dnsfilter.Decision {
			switch name {
			case "learn.test":
				return dnsfilter.Decision{Allow: true, Learn: true}
			case "plain.test":
				return dnsfilter.Decision{Allow: true}
			}
			return dnsfilter.Decision{}
		}})
	if err != nil {
		return err
	}
	via := netip.AddrPortFrom(lo, port).String()
	cases := []struct{ name, server, qname string }{
		{"baseline: straight to the resolver", upstream, "plain.test"},
		{"filter: refused by policy", via, "denied.test"},
		{"filter: forwarded", via, "plain.test"},
	}
	if set != nil {
		cases = append(cases, struct{ name, server, qname string }{"filter: forwarded + learned (nftables)", via, "learn.test"})
	} else {
		fmt.Println("(not root: the learned case, which writes an nftables set, is skipped)")
	}
	fmt.Printf("%-42s %8s %8s %8s\n", "case (n="+fmt.Sprint(n)+")", "p50", "p99", "max")
	for _, c := range cases {
		lat, err := measure(c.server, c.qname, n)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		slices.Sort(lat)
		fmt.Printf("%-42s %8s %8s %8s\n", c.name, pct(lat, 50), pct(lat, 99), lat[len(lat)-1].Round(time.Microsecond))
	}
	return nil
}

func measure(server, name string, n int) ([]time.Duration, error) {
	c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, _, err := c.Exchange(new(dns.Msg).SetQuestion(dns.Fqdn(name), dns.TypeA), server); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(start))
	}
	return lat, nil
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := len(sorted) * p / 100
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i].Round(time.Microsecond)
}

func startUpstream() (string, func(), error) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg).SetReply(r)
		rr, _ := dns.NewRR(r.Question[0].Name + " 60 IN A 192.0.2.10")
		m.Answer = append(m.Answer, rr)
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	return pc.LocalAddr().String(), func() { _ = srv.Shutdown() }, nil
}

func freePort() (uint16, error) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer pc.Close()
	return uint16(pc.LocalAddr().(*net.UDPAddr).Port), nil
}

// nftSet is a timeout set like a sandbox's dl_<veth>.
type nftSet struct {
	table *nftables.Table
	set   *nftables.Set
}

func newNftSet() (*nftSet, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, err
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: "albench4"}
	s := &nftables.Set{Table: t, Name: "dl_bench", KeyType: nftables.TypeIPAddr, HasTimeout: true}
	c.AddTable(t)
	if err := c.AddSet(s, nil); err != nil {
		return nil, err
	}
	if err := c.Flush(); err != nil {
		return nil, fmt.Errorf("creating table inet albench4: %w", err)
	}
	return &nftSet{table: t, set: s}, nil
}

func (s *nftSet) add(addrs []netip.Addr, ttl time.Duration) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	var els []nftables.SetElement
	for _, a := range addrs {
		b := a.As4()
		els = append(els, nftables.SetElement{Key: b[:], Timeout: max(ttl, 5*time.Minute)})
	}
	if err := c.SetAddElements(s.set, els); err != nil {
		return err
	}
	return c.Flush()
}

func (s *nftSet) remove() {
	if c, err := nftables.New(); err == nil {
		c.DelTable(s.table)
		_ = c.Flush()
	}
}
