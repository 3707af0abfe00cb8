package dnsfilter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Decision is the policy's answer for one query name.
type Decision struct {
	Allow bool   // forward the query
	Learn bool   // hand the A answers to Learn
	Rule  string // what decided, for the audit log
}

// Event describes one answered query.
type Event struct {
	Time    time.Time
	Name    string // without the trailing dot
	QType   string
	Allowed bool
	Rule    string
	Rcode   string
	Answers []netip.Addr // A records of the answer
}

// Sandbox is one filtered resolver.
type Sandbox struct {
	ID     string
	Listen netip.Addr // address to listen on (port 53, UDP and TCP)
	Client netip.Addr // only queries from this address are answered
	// Decide is the policy; replaced with Filter.Start on a live change.
	Decide func(name string) Decision
	// Learn is called with a name whose Decision has Learn set, its A
	// answers and their smallest TTL, before the answer is sent.
	Learn func(name string, addrs []netip.Addr, ttl time.Duration) error
	// Record, if set, receives every decision.
	Record func(Event)
}

// Config of the filter.
type Config struct {
	// Upstreams are "ip" or "ip:port" resolvers, tried in order.
	Upstreams []string
	// Timeout of one upstream exchange; default 3s.
	Timeout time.Duration
	// Port to listen on; default 53 (tests may use another).
	Port uint16
	// MaxInFlight bounds one sandbox's queries waiting for an upstream
	// (more get SERVFAIL at once), so a sandbox flooding its resolver
	// cannot tie up the daemon; default DefaultMaxInFlight.
	MaxInFlight int
	Log         *slog.Logger
}

// DefaultMaxInFlight is the default Config.MaxInFlight.
const DefaultMaxInFlight = 64

// Filter runs the resolvers of all sandboxes of one daemon.
type Filter struct {
	cfg       Config
	upstreams []string

	mu sync.Mutex
	// servers by sandbox id.
	servers map[string]*server
}

// New validates cfg and returns an idle filter.
func New(cfg Config) (*Filter, error) {
	if len(cfg.Upstreams) == 0 {
		return nil, errors.New("dns filter: no upstream resolver")
	}
	var ups []string
	for _, u := range cfg.Upstreams {
		hp, err := normalizeUpstream(u)
		if err != nil {
			return nil, err
		}
		ups = append(ups, hp)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 3 * time.Second
	}
	if cfg.Port == 0 {
		cfg.Port = 53
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Filter{cfg: cfg, upstreams: ups, servers: map[string]*server{}}, nil
}

// normalizeUpstream turns "ip" or "ip:port" into "ip:port".
func normalizeUpstream(u string) (string, error) {
	u = strings.TrimSpace(u)
	if a, err := netip.ParseAddr(u); err == nil {
		return netip.AddrPortFrom(a, 53).String(), nil
	}
	ap, err := netip.ParseAddrPort(u)
	if err != nil {
		return "", fmt.Errorf("dns upstream %q: want an IP address or ip:port", u)
	}
	return ap.String(), nil
}

// Upstreams returns the normalized upstream list.
func (f *Filter) Upstreams() []string { return append([]string(nil), f.upstreams...) }

// Port returns the port the resolvers listen on.
func (f *Filter) Port() uint16 { return f.cfg.Port }

// Start runs (or, when already running, re-configures) the resolver of
// sb.ID. The listen address must already be configured on the host.
func (f *Filter) Start(sb Sandbox) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.servers[sb.ID]; ok && s.sb.Listen == sb.Listen {
		s.policy.Store(&sb)
		return nil
	} else if ok {
		s.shutdown()
		delete(f.servers, sb.ID)
	}
	s, err := f.listen(sb)
	if err != nil {
		return err
	}
	f.servers[sb.ID] = s
	return nil
}

// Running reports whether sandbox id has a resolver.
func (f *Filter) Running(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.servers[id]
	return ok
}

// Stop ends the resolver of id; not running is fine.
func (f *Filter) Stop(id string) {
	f.mu.Lock()
	s, ok := f.servers[id]
	delete(f.servers, id)
	f.mu.Unlock()
	if ok {
		s.shutdown()
	}
}

// Close stops every resolver.
func (f *Filter) Close() {
	f.mu.Lock()
	servers := f.servers
	f.servers = map[string]*server{}
	f.mu.Unlock()
	for _, s := range servers {
		s.shutdown()
	}
}

// server is one sandbox's pair of listeners.
type server struct {
	f      *Filter
	sb     Sandbox                 // identity (ID, Listen, Client)
	policy atomic.Pointer[Sandbox] // current callbacks
	slots  chan struct{}           // one per query waiting for an upstream
	udp    *dns.Server
	tcp    *dns.Server
}

func (f *Filter) listen(sb Sandbox) (*server, error) {
	addr := netip.AddrPortFrom(sb.Listen, f.cfg.Port).String()
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		return nil, fmt.Errorf("dns filter of %s: listening on udp %s: %w", sb.ID, addr, err)
	}
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("dns filter of %s: listening on tcp %s: %w", sb.ID, addr, err)
	}
	s := &server{f: f, sb: sb, slots: make(chan struct{}, f.cfg.MaxInFlight)}
	s.policy.Store(&sb)
	s.udp = &dns.Server{PacketConn: pc, Handler: s}
	s.tcp = &dns.Server{Listener: ln, Handler: s}
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		go func() {
			if err := srv.ActivateAndServe(); err != nil {
				f.cfg.Log.Debug("dns filter listener ended", "sandbox", sb.ID, "err", err)
			}
		}()
	}
	return s, nil
}

func (s *server) shutdown() {
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := srv.ShutdownContext(ctx); err != nil {
			s.f.cfg.Log.Debug("stopping dns filter listener", "sandbox", s.sb.ID, "err", err)
		}
		cancel()
	}
}

// ServeDNS implements dns.Handler.
func (s *server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	sb := s.policy.Load()
	if !s.fromClient(w.RemoteAddr()) || len(req.Question) != 1 || req.Opcode != dns.OpcodeQuery {
		// Another sandbox reaching this address, or not a plain query.
		reply(w, new(dns.Msg).SetRcode(req, dns.RcodeRefused))
		return
	}
	q := req.Question[0]
	name := strings.TrimSuffix(strings.ToLower(q.Name), ".")
	ev := Event{Time: time.Now().UTC(), Name: name, QType: dns.TypeToString[q.Qtype]}
	d := sb.Decide(name)
	ev.Rule = d.Rule
	if !d.Allow {
		ev.Rcode = dns.RcodeToString[dns.RcodeRefused]
		record(sb, ev)
		reply(w, new(dns.Msg).SetRcode(req, dns.RcodeRefused))
		return
	}
	ev.Allowed = true
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		ev.Rcode = dns.RcodeToString[dns.RcodeServerFailure]
		ev.Rule += " (too many queries in flight)"
		record(sb, ev)
		reply(w, new(dns.Msg).SetRcode(req, dns.RcodeServerFailure))
		return
	}
	resp, err := s.forward(req)
	if err != nil {
		s.f.cfg.Log.Warn("dns upstream failed", "sandbox", sb.ID, "name", name, "err", err)
		ev.Rcode = dns.RcodeToString[dns.RcodeServerFailure]
		record(sb, ev)
		reply(w, new(dns.Msg).SetRcode(req, dns.RcodeServerFailure))
		return
	}
	ev.Rcode = dns.RcodeToString[resp.Rcode]
	addrs, ttl := aRecords(resp)
	ev.Answers = addrs
	if d.Learn && len(addrs) > 0 && sb.Learn != nil {
		if err := sb.Learn(name, addrs, ttl); err != nil {
			// Without the firewall update the answer would be useless:
			// fail the query rather than hand out unreachable addresses.
			s.f.cfg.Log.Error("dns filter: opening answers", "sandbox", sb.ID, "name", name, "err", err)
			ev.Rcode = dns.RcodeToString[dns.RcodeServerFailure]
			record(sb, ev)
			reply(w, new(dns.Msg).SetRcode(req, dns.RcodeServerFailure))
			return
		}
	}
	record(sb, ev)
	resp.Id = req.Id
	reply(w, resp)
}

func record(sb *Sandbox, ev Event) {
	if sb.Record != nil {
		sb.Record(ev)
	}
}

func reply(w dns.ResponseWriter, m *dns.Msg) {
	_ = w.WriteMsg(m) // the client may be gone; nothing to do about it
}

// fromClient reports whether addr is the sandbox's own address.
func (s *server) fromClient(addr net.Addr) bool {
	var ip net.IP
	switch a := addr.(type) {
	case *net.UDPAddr:
		ip = a.IP
	case *net.TCPAddr:
		ip = a.IP
	default:
		return false
	}
	got, ok := netip.AddrFromSlice(ip)
	return ok && got.Unmap() == s.sb.Client
}

// forward sends req to the upstreams in order over UDP (again over TCP
// when the answer was truncated) and returns the first answer.
func (s *server) forward(req *dns.Msg) (*dns.Msg, error) {
	var errs []error
	for _, up := range s.f.upstreams {
		resp, err := s.exchange("udp", req, up)
		if err == nil && resp.Truncated {
			resp, err = s.exchange("tcp", req, up)
		}
		if err == nil {
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", up, err))
	}
	return nil, errors.Join(errs...)
}

func (s *server) exchange(netw string, req *dns.Msg, up string) (*dns.Msg, error) {
	c := &dns.Client{Net: netw, Timeout: s.f.cfg.Timeout}
	resp, _, err := c.Exchange(req.Copy(), up)
	return resp, err
}

// aRecords returns the IPv4 addresses of the answer section and their
// smallest TTL.
func aRecords(m *dns.Msg) ([]netip.Addr, time.Duration) {
	var out []netip.Addr
	var ttl uint32
	for _, rr := range m.Answer {
		a, ok := rr.(*dns.A)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.A.To4())
		if !ok {
			continue
		}
		if len(out) == 0 || a.Hdr.Ttl < ttl {
			ttl = a.Hdr.Ttl
		}
		out = append(out, ip)
	}
	return out, time.Duration(ttl) * time.Second
}
