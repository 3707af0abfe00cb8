package daemon

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/airlock-sandbox/airlock/internal/cluster"
)

// The cluster's own addresses no sandbox reaches, whatever --deny-out,
// --deny-out-except, public addressing or a sandbox's allowOut say
// (network.Config.BlockedAddrs): the store's host (from --store), the
// artifact store's ($AIRLOCK_S3_ENDPOINT, when set: the default AWS
// endpoint is a public service shared with everyone, whose addresses
// rotate) and, on a cluster node, every registered node's advertise
// address, refreshed from the nodes table while the node heartbeats.

// blockedRefreshInterval is how often a node re-reads the nodes table
// for the blocked set.
const blockedRefreshInterval = 10 * time.Second

// blockedResolveTimeout bounds the name lookups of one refresh.
const blockedResolveTimeout = 5 * time.Second

// storeHosts returns the hosts a PostgreSQL DSN (URL or keyword/value,
// with fallback hosts) connects to; Unix sockets and SQLite ("") give none.
func storeHosts(dsn string) ([]string, error) {
	if dsn == "" {
		return nil, nil
	}
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parsing --store for its address: %w", err)
	}
	hosts := []string{cfg.Host}
	for _, f := range cfg.Fallbacks {
		hosts = append(hosts, f.Host)
	}
	var out []string
	for _, h := range hosts {
		if h != "" && !strings.HasPrefix(h, "/") && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out, nil
}

// endpointHost returns the host of an S3 endpoint ("host[:port]" or
// "http(s)://host[:port]"); "" for none.
func endpointHost(endpoint string) (string, error) {
	if endpoint == "" {
		return "", nil
	}
	hostport := endpoint
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil || u.Host == "" {
			return "", fmt.Errorf("S3 endpoint %q: want host[:port] or http(s)://host[:port]", endpoint)
		}
		hostport = u.Host
	}
	return addrHost(hostport), nil
}

// addrHost is the host of "host:port", "[v6]:port" or a bare host.
func addrHost(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.Trim(hostport, "[]")
}

// resolveHosts turns host names and literals into addresses; a name that
// does not resolve is logged by the caller through the returned errors.
func resolveHosts(ctx context.Context, hosts []string) ([]netip.Addr, []error) {
	ctx, cancel := context.WithTimeout(ctx, blockedResolveTimeout)
	defer cancel()
	var out []netip.Addr
	var errs []error
	for _, h := range hosts {
		if a, err := netip.ParseAddr(h); err == nil {
			out = append(out, a.Unmap())
			continue
		}
		as, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", h)
		if err != nil {
			errs = append(errs, fmt.Errorf("resolving %s: %w", h, err))
			continue
		}
		for _, a := range as {
			out = append(out, a.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), errs
}

// infraAddrs is the part of the blocked set that does not change while the
// daemon runs: the store's and the artifact store's addresses.
func (d *daemon) infraAddrs(ctx context.Context, s3Endpoint string) []netip.Addr {
	hosts, err := storeHosts(d.cfg.Store)
	if err != nil {
		d.log.Warn("the store's address is not blocked for sandboxes", "err", err)
	}
	if strings.HasPrefix(d.cfg.Artifacts, "s3://") {
		h, err := endpointHost(s3Endpoint)
		if err != nil {
			d.log.Warn("the artifact store's address is not blocked for sandboxes", "err", err)
		} else if h != "" {
			hosts = append(hosts, h)
		}
	}
	addrs, errs := resolveHosts(ctx, hosts)
	for _, err := range errs {
		d.log.Warn("an address of the cluster is not blocked for sandboxes", "err", err)
	}
	return addrs
}

// blockedAddrs is the blocked set: every node's advertise address
// (resolved) and infra, sorted, without duplicates.
func blockedAddrs(ctx context.Context, nodes []cluster.Node, infra []netip.Addr) ([]netip.Addr, []error) {
	var hosts []string
	for _, nd := range nodes {
		hosts = append(hosts, addrHost(nd.Addr))
	}
	addrs, errs := resolveHosts(ctx, hosts)
	addrs = append(addrs, infra...)
	slices.SortFunc(addrs, netip.Addr.Compare)
	return slices.Compact(addrs), errs
}

// blockedState is what the last refresh of a node's blocked set found
// (used by the heartbeat loop only).
type blockedState struct {
	at    time.Time
	addrs []netip.Addr
}

// refreshBlocked re-reads the nodes table (at most every
// blockedRefreshInterval) and puts every node's advertise address, with
// the store's and the artifact store's, into the blocked set.
// It runs in the node's heartbeat loop (node.Config.EachBeat) and once
// before sandboxes are re-attached.
func (d *daemon) refreshBlocked(ctx context.Context) {
	cs, ok := d.st.(cluster.Store)
	if !ok || time.Since(d.blocked.at) < blockedRefreshInterval {
		return
	}
	d.blocked.at = time.Now()
	lctx, cancel := context.WithTimeout(ctx, blockedResolveTimeout)
	nodes, err := cs.Nodes(lctx)
	cancel()
	if err != nil {
		d.log.Warn("cluster node: listing nodes for the blocked set", "err", err)
		return
	}
	addrs, errs := blockedAddrs(ctx, nodes, d.infraBlocked)
	for _, err := range errs {
		d.log.Warn("cluster node: a node's address is not blocked for sandboxes", "err", err)
	}
	if slices.Equal(addrs, d.blocked.addrs) {
		return
	}
	if err := d.netMgr.SetBlockedAddrs(addrs); err != nil {
		d.log.Error("cluster node: updating the blocked set", "err", err)
		return
	}
	d.blocked.addrs = addrs
	d.log.Info("cluster addresses blocked for sandboxes", "addrs", addrs)
}
