//go:build linux

package network

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/dnsfilter"
	"github.com/airlock-sandbox/airlock/internal/nflog"
)

// Manager creates and removes sandbox networks and owns the nftables table
// "inet <NamePrefix>". Its methods are safe for concurrent use as long as
// each (id, slot) is handled by one caller at a time.
type Manager struct {
	cfg Config
	log *slog.Logger
	fw  *firewall
	// dns runs the resolvers of sandboxes with domain rules (nil without
	// Config.DNSUpstreams); audit keeps their egress logs.
	dns   *dnsfilter.Filter
	audit *audit.Book
	nflog *nflog.Conn // audit reader, nil when off
	nfq   *nfQueue    // approval hold reader, nil when off (approval_linux.go)
	ends  *flowEnds   // conntrack destroy reader, nil when off (conntrack_linux.go)
	// approvedNames: names the hook just allowed, until the DNS filter
	// learns their answers (approval_dns_linux.go).
	approvedNames sync.Map

	ifMu sync.Mutex
	// ifaces maps host veth names to sandbox ids; learned maps a veth's
	// learned addresses to the rule that opened them (audit_linux.go).
	ifaces  map[string]string
	learned map[string]map[netip.Addr]string
	// names: what sandboxes with an egressProxy resolved (socks_linux.go).
	names proxyNames
	// relayHold: sandboxes with an egressProxy and an approval hook, by id
	// (relayhold_linux.go).
	relayHold map[string]relayHold

	// failAfterHostSide, when set (tests only), makes Setup fail after the
	// host side is configured, to exercise the undo path.
	failAfterHostSide func() error
}

// NewManager enables IPv4 forwarding and (re)installs the isolation
// firewall. Members of the internet set of a previous run whose veth still
// exists are kept, so sandboxes survive a daemon restart.
func NewManager(ctx context.Context, cfg Config, log *slog.Logger) (*Manager, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg, log: log.With("component", "network"), fw: newFirewall(cfg), audit: audit.NewBook(audit.DefaultSize, cfg.AuditLogs),
		ifaces: map[string]string{}, learned: map[string]map[netip.Addr]string{}, relayHold: map[string]relayHold{}}
	if cfg.AuditObserver != nil {
		m.audit.Observe(cfg.AuditObserver)
	}
	if len(cfg.DNSUpstreams) > 0 {
		if m.dns, err = dnsfilter.New(dnsfilter.Config{Upstreams: cfg.DNSUpstreams, Port: cfg.DNSPort, Log: m.log}); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	if err := ensureNetNSOnce(); err != nil {
		return nil, err
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0o644); err != nil {
		return nil, fmt.Errorf("enabling ip_forward: %w", err)
	}
	keep, err := m.fw.keepMembers(m.fw.set)
	if err != nil {
		return nil, err
	}
	// A sandbox killed before the restart stays cut until its teardown
	// (finished from the journal) deletes its veth.
	keepCut, err := m.fw.keepMembers(m.fw.cut)
	if err != nil {
		return nil, err
	}
	if err := m.fw.install(keep, keepCut); err != nil {
		return nil, err
	}
	m.startAudit()
	m.startFlowEnds()
	if err := m.startApproval(); err != nil {
		return nil, err
	}
	m.log.Debug("network ready", "subnet", cfg.Subnet, "table", "inet "+cfg.NamePrefix, "kept_internet", len(keep))
	return m, nil
}

// Config returns the effective (defaulted) configuration.
func (m *Manager) Config() Config { return m.cfg }

// EndpointFor computes the endpoint of sandbox id in slot without touching
// the system.
func (m *Manager) EndpointFor(id string, slot int) (*Endpoint, error) {
	return endpointFor(m.cfg, id, slot)
}

// Setup creates the network of sandbox id in slot: netns, veth pair,
// addresses, default route and internet permission. Everything is undone on
// failure. It returns ErrExists if the netns already exists.
func (m *Manager) Setup(ctx context.Context, id string, slot int, opts Options) (_ *Endpoint, err error) {
	ep, err := m.EndpointFor(id, slot)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	nsName := NetNSName(m.cfg.NamePrefix, id)
	if m.Exists(id) {
		return nil, fmt.Errorf("%w: network namespace %s", ErrExists, nsName)
	}
	if l, err := netlink.LinkByName(ep.HostIf); err == nil {
		// The slot allocator says the slot is free: this is a leftover.
		m.log.Warn("removing stale veth", "iface", ep.HostIf, "sandbox", id)
		if err := netlink.LinkDel(l); err != nil {
			return nil, fmt.Errorf("removing stale veth %s: %w", ep.HostIf, err)
		}
	}
	// Teardown uncuts the veth name before the slot is free again; this
	// only catches a leftover (a teardown that lost its slot).
	if err := m.fw.setCut(ep.HostIf, false); err != nil {
		return nil, err
	}

	var undo []func() error
	defer func() {
		if err == nil {
			return
		}
		for i := len(undo) - 1; i >= 0; i-- {
			if uerr := undo[i](); uerr != nil {
				m.log.Error("undoing network setup", "sandbox", id, "err", uerr)
			}
		}
	}()

	if err := createNamedNetNS(nsName); err != nil {
		// The file may have been created before the failure.
		_ = deleteNamedNetNS(ep.NetNSPath)
		return nil, fmt.Errorf("creating network namespace %s: %w", nsName, err)
	}
	undo = append(undo, func() error { return deleteNamedNetNS(ep.NetNSPath) })

	nsh, err := netns.GetFromPath(ep.NetNSPath)
	if err != nil {
		return nil, fmt.Errorf("opening network namespace %s: %w", nsName, err)
	}
	defer nsh.Close()

	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: ep.HostIf},
		PeerName:      GuestIfName,
		PeerNamespace: netlink.NsFd(int(nsh)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("creating veth %s: %w", ep.HostIf, err)
	}
	undo = append(undo, func() error { return deleteLink(ep.HostIf) })

	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := m.configureHostSide(ep); err != nil {
		return nil, err
	}
	if m.failAfterHostSide != nil {
		if err := m.failAfterHostSide(); err != nil {
			return nil, err
		}
	}
	if err := configureGuestSide(nsh, ep); err != nil {
		return nil, err
	}
	// The kernel attaches a veth's queueing discipline asynchronously after
	// carrier comes up; until then packets are dropped. Wait for both ends
	// so the first packets the daemon sends are not lost.
	if err := waitOperUp(ctx, netlink.LinkByName, ep.HostIf); err != nil {
		return nil, err
	}
	if err := waitGuestUp(ctx, nsh); err != nil {
		return nil, err
	}
	m.remember(ep.HostIf, id)
	undo = append(undo, func() error { m.forget(ep.HostIf); return nil })
	if opts.AllowInternet {
		if err := m.fw.setInternet(ep.HostIf, true); err != nil {
			return nil, err
		}
		undo = append(undo, func() error { return m.fw.setInternet(ep.HostIf, false) })
	}
	if !opts.Egress.Empty() {
		if err := m.fw.setEgress(ep.HostIf, opts.egress()); err != nil {
			return nil, err
		}
		m.noteRelayHold(id, ep.HostIf, opts.egress())
		undo = append(undo, func() error { m.noteRelayHold(id, ep.HostIf, Egress{}); return m.fw.clearEgress(ep.HostIf) })
	}
	if opts.needsDNS() {
		if err := m.applyDNS(ep, opts); err != nil {
			return nil, err
		}
		undo = append(undo, func() error { return m.stopDNS(ep) })
	}
	if opts.EgressProxy {
		if err := m.applySocks(ep, true); err != nil { // socks_linux.go
			return nil, err
		}
		undo = append(undo, func() error { return m.applySocks(ep, false) })
	}
	m.noteDenyOutConflicts(id, opts.Egress)
	m.log.Debug("sandbox network up", "sandbox", id, "slot", slot, "iface", ep.HostIf,
		"guest", ep.GuestIP, "internet", opts.AllowInternet)
	return ep, nil
}

// configureHostSide sets sysctls, the gateway address and brings the host
// veth up.
func (m *Manager) configureHostSide(ep *Endpoint) error {
	link, err := netlink.LinkByName(ep.HostIf)
	if err != nil {
		return fmt.Errorf("looking up veth %s: %w", ep.HostIf, err)
	}
	// Strict reverse-path filtering (effective value is max(all, iface)),
	// and no IPv6 on the host side: the policy is IPv4-only.
	sysctls := map[string]string{
		"/proc/sys/net/ipv4/conf/" + ep.HostIf + "/rp_filter":        "1",
		"/proc/sys/net/ipv4/conf/" + ep.HostIf + "/send_redirects":   "0",
		"/proc/sys/net/ipv6/conf/" + ep.HostIf + "/disable_ipv6":     "1",
		"/proc/sys/net/ipv4/conf/" + ep.HostIf + "/accept_redirects": "0",
	}
	for path, v := range sysctls {
		if err := os.WriteFile(path, []byte(v+"\n"), 0o644); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("setting %s: %w", path, err)
		}
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: ep.HostIP.AsSlice(), Mask: net.CIDRMask(ep.PrefixLen, 32)}}
	if err := netlink.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("adding %s to %s: %w", addr, ep.HostIf, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("bringing up %s: %w", ep.HostIf, err)
	}
	return nil
}

// configureGuestSide brings lo and eth0 up inside the namespace, with the
// guest address and a default route via the host side.
func configureGuestSide(nsh netns.NsHandle, ep *Endpoint) error {
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		return fmt.Errorf("netlink handle in %s: %w", ep.NetNSPath, err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("looking up lo in %s: %w", ep.NetNSPath, err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bringing up lo in %s: %w", ep.NetNSPath, err)
	}
	eth, err := h.LinkByName(GuestIfName)
	if err != nil {
		return fmt.Errorf("looking up %s in %s: %w", GuestIfName, ep.NetNSPath, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: ep.GuestIP.AsSlice(), Mask: net.CIDRMask(ep.PrefixLen, 32)}}
	if err := h.AddrAdd(eth, addr); err != nil {
		return fmt.Errorf("adding %s to %s in %s: %w", addr, GuestIfName, ep.NetNSPath, err)
	}
	if err := h.LinkSetUp(eth); err != nil {
		return fmt.Errorf("bringing up %s in %s: %w", GuestIfName, ep.NetNSPath, err)
	}
	route := &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: ep.HostIP.AsSlice()}
	if err := h.RouteAdd(route); err != nil {
		return fmt.Errorf("adding default route via %s in %s: %w", ep.HostIP, ep.NetNSPath, err)
	}
	return nil
}

// operUpTimeout bounds the wait for a new veth to become operational.
const operUpTimeout = 2 * time.Second

// waitOperUp polls a link until its operational state is up.
func waitOperUp(ctx context.Context, byName func(string) (netlink.Link, error), name string) error {
	ctx, cancel := context.WithTimeout(ctx, operUpTimeout)
	defer cancel()
	for {
		l, err := byName(name)
		if err != nil {
			return fmt.Errorf("looking up %s: %w", name, err)
		}
		if l.Attrs().OperState == netlink.OperUp {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to come up (state %s): %w", name, l.Attrs().OperState, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

func waitGuestUp(ctx context.Context, nsh netns.NsHandle) error {
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		return fmt.Errorf("netlink handle in sandbox namespace: %w", err)
	}
	defer h.Close()
	return waitOperUp(ctx, h.LinkByName, GuestIfName)
}

// Teardown removes the network of sandbox id in slot: internet permission,
// host veth (its peer goes with it), then its Cut (the veth name and the
// slot's address may be reused once Teardown returned), and the named netns.
// Missing pieces are not errors. It refuses to delete a veth whose peer lives in a different
// namespace than the sandbox's (a wrong slot).
//
// A negative slot means "unknown" (leak cleanup after losing state): the
// host veth whose peer lives in the sandbox's netns is found and removed.
func (m *Manager) Teardown(ctx context.Context, id string, slot int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if slot < 0 {
		found, err := m.findSlot(id)
		if err != nil {
			return err
		}
		if found < 0 {
			// No veth left: only the namespace (if any) remains.
			if err := validateID(id); err != nil {
				return err
			}
			path := filepath.Join(NetNSDir, NetNSName(m.cfg.NamePrefix, id))
			if err := deleteNamedNetNS(path); err != nil {
				return fmt.Errorf("deleting network namespace %s: %w", path, err)
			}
			return nil
		}
		slot = found
	}
	ep, err := m.EndpointFor(id, slot)
	if err != nil {
		return err
	}
	var errs []error
	if err := m.applySocks(ep, false); err != nil { // socks_linux.go
		errs = append(errs, err)
	}
	if err := m.stopDNS(ep); err != nil {
		errs = append(errs, err)
	}
	m.audit.Drop(id)
	m.forget(ep.HostIf)
	m.noteRelayHold(id, ep.HostIf, Egress{})               // relayhold_linux.go
	m.forgetApproval(id)                                   // approval_linux.go
	if err := m.fw.clearIntercept(ep.HostIf); err != nil { // intercept_linux.go
		errs = append(errs, err)
	}
	vethGone := true
	if link, err := netlink.LinkByName(ep.HostIf); err == nil {
		if err := checkPeerNS(link, ep); err != nil {
			return err
		}
		if err := netlink.LinkDel(link); err != nil && !isLinkNotFound(err) {
			vethGone = false
			errs = append(errs, fmt.Errorf("deleting veth %s: %w", ep.HostIf, err))
		}
	} else if !isLinkNotFound(err) {
		vethGone = false
		errs = append(errs, fmt.Errorf("looking up veth %s: %w", ep.HostIf, err))
	}
	if vethGone {
		// The veth is gone: its name (and the slot's address) may be
		// reused once Teardown returned, and must not be cut then.
		if err := m.fw.setCut(ep.HostIf, false); err != nil {
			errs = append(errs, err)
		}
	}
	if err := m.fw.setInternet(ep.HostIf, false); err != nil {
		errs = append(errs, err)
	}
	if err := m.fw.clearEgress(ep.HostIf); err != nil {
		errs = append(errs, err)
	}
	if err := deleteNamedNetNS(ep.NetNSPath); err != nil {
		errs = append(errs, fmt.Errorf("deleting network namespace %s: %w", ep.NetNSPath, err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("tearing down network of %s: %w", id, errors.Join(errs...))
	}
	m.log.Debug("sandbox network down", "sandbox", id, "slot", slot)
	return nil
}

// checkPeerNS verifies that the veth's peer is in ep's namespace, when both
// can be determined. The link must have been looked up already: dumping a
// veth makes the kernel assign its peer namespace an id.
func checkPeerNS(link netlink.Link, ep *Endpoint) error {
	got := link.Attrs().NetNsID
	if _, ok := link.(*netlink.Veth); !ok || got < 0 {
		return nil
	}
	nsh, err := netns.GetFromPath(ep.NetNSPath)
	if err != nil {
		return nil // namespace already gone: nothing to compare with
	}
	defer nsh.Close()
	want, err := netlink.GetNetNsIdByFd(int(nsh))
	if err != nil {
		return nil
	}
	if want != got {
		return fmt.Errorf("%w: veth %s does not belong to sandbox %s (wrong slot?)", ErrInvalid, ep.HostIf, ep.ID)
	}
	return nil
}

// retryDump runs a netlink dump again when the kernel reports it was
// interrupted (the table changed while it was read — other sandboxes'
// veths come and go all the time), up to a few times.
func retryDump[T any](dump func() (T, error)) (T, error) {
	var out T
	var err error
	for range 5 {
		out, err = dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return out, err
}

// findSlot returns the slot of the host veth whose peer is in the netns of
// sandbox id, or -1 when there is none.
func (m *Manager) findSlot(id string) (int, error) {
	if err := validateID(id); err != nil {
		return -1, err
	}
	nsh, err := netns.GetFromPath(filepath.Join(NetNSDir, NetNSName(m.cfg.NamePrefix, id)))
	if err != nil {
		return -1, nil
	}
	defer nsh.Close()
	links, err := retryDump(netlink.LinkList)
	if err != nil {
		return -1, fmt.Errorf("listing links: %w", err)
	}
	nsid, err := netlink.GetNetNsIdByFd(int(nsh))
	if err != nil || nsid < 0 {
		return -1, nil
	}
	for _, l := range links {
		name := l.Attrs().Name
		hex, ok := strings.CutPrefix(name, m.fw.ifPrefix)
		if _, veth := l.(*netlink.Veth); !ok || !veth || len(hex) != slotDigits || l.Attrs().NetNsID != nsid {
			continue
		}
		slot, err := strconv.ParseUint(hex, 16, 32)
		if err != nil {
			continue
		}
		return int(slot), nil
	}
	return -1, nil
}

// SetInternet allows or denies outbound internet for the sandbox. The
// sandbox's veth must exist (ErrNotFound otherwise).
func (m *Manager) SetInternet(ctx context.Context, id string, slot int, allow bool) error {
	ep, err := m.EndpointFor(id, slot)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := netlink.LinkByName(ep.HostIf); err != nil {
		if isLinkNotFound(err) {
			return fmt.Errorf("%w: veth %s of sandbox %s", ErrNotFound, ep.HostIf, id)
		}
		return fmt.Errorf("looking up veth %s: %w", ep.HostIf, err)
	}
	return m.fw.setInternet(ep.HostIf, allow)
}

// InternetAllowed reports whether the sandbox in slot is in the internet
// set.
func (m *Manager) InternetAllowed(slot int) (bool, error) {
	names, err := m.fw.internetMembers()
	if err != nil {
		return false, err
	}
	want := HostIfName(m.cfg.NamePrefix, slot)
	for _, n := range names {
		if n == want {
			return true, nil
		}
	}
	return false, nil
}

// Exists reports whether the named netns of sandbox id exists.
func (m *Manager) Exists(id string) bool {
	if validateID(id) != nil {
		return false
	}
	_, err := os.Stat(filepath.Join(NetNSDir, NetNSName(m.cfg.NamePrefix, id)))
	return err == nil
}

// ListNamespaces returns the ids of all named netns with our prefix.
func (m *Manager) ListNamespaces() ([]string, error) {
	ents, err := os.ReadDir(NetNSDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing %s: %w", NetNSDir, err)
	}
	var ids []string
	for _, e := range ents {
		if id, ok := idFromNetNSName(m.cfg.NamePrefix, e.Name()); ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Close releases the manager. With removeTable it also deletes the nftables
// table (use only when no sandbox remains).
func (m *Manager) Close(ctx context.Context, removeTable bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.dns != nil {
		m.dns.Close()
	}
	if m.nflog != nil {
		if err := m.nflog.Close(); err != nil {
			m.log.Debug("closing the egress audit reader", "err", err)
		}
	}
	m.closeApproval()
	m.closeFlowEnds()
	if removeTable {
		return m.fw.remove()
	}
	return nil
}

// createNamedNetNS creates a netns bind-mounted at NetNSDir/name. The work
// happens on a dedicated, locked OS thread that is restored to its original
// namespace; if that fails the thread stays locked and dies with its
// goroutine, so no other goroutine ever runs in the wrong namespace.
func createNamedNetNS(name string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("getting current network namespace: %w", err)
			return
		}
		defer orig.Close()
		ns, err := netns.NewNamed(name)
		if err == nil {
			ns.Close()
		}
		if serr := netns.Set(orig); serr != nil {
			errc <- errors.Join(err, fmt.Errorf("restoring network namespace: %w", serr))
			return // thread stays locked: the runtime discards it
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// deleteLink deletes a link by name; missing is fine.
func deleteLink(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		if isLinkNotFound(err) {
			return nil
		}
		return fmt.Errorf("looking up %s: %w", name, err)
	}
	if err := netlink.LinkDel(l); err != nil && !isLinkNotFound(err) {
		return fmt.Errorf("deleting %s: %w", name, err)
	}
	return nil
}

func isLinkNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV)
}
