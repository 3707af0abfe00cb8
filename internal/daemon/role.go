package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/clustertls"
)

// role is the daemon's part in a cluster (--role) and what it needs for it.
type role struct {
	name string
	// api: stateless api tier (internal/cluster/gateway); node: runs sandboxes for
	// the api tier. Neither: --role all, one host.
	api, node bool
	// secret is the cluster secret (api and node): a second factor on the
	// mutually authenticated TLS hop.
	secret string
	// tls is the api tier's or the node's TLS material (--cluster-tls-dir):
	// the cluster CA and its own certificate.
	tls *clustertls.Material
	// nodeID, advertise and labels are a node's identity (--node-id,
	// --advertise-addr, --node-labels); nodeID is "" for --role all,
	// which is the store's single-host scope.
	nodeID, advertise string
	labels            []string
}

// nodeIDPattern is what a node id may look like: a Kubernetes node name or
// a host name fits.
var nodeIDPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)

// checkRole validates --role and the cluster flags that go with it.
func checkRole(cfg *Config) (role, error) {
	r := role{name: cfg.Role}
	switch cfg.Role {
	case "", cluster.RoleAll:
		r.name = cluster.RoleAll
		for flag, set := range map[string]bool{"--node-id": cfg.NodeID != "", "--advertise-addr": cfg.AdvertiseAddr != "",
			"--cluster-secret-file": cfg.ClusterSecretFile != "", "--cluster-tls-dir": cfg.ClusterTLSDir != "", "--node-labels": len(cfg.NodeLabels) > 0,
			"--node-cpus": cfg.NodeCPUs != 0, "--node-memory": cfg.NodeMemoryMB != 0} {
			if set {
				return r, fmt.Errorf("%s is a cluster flag: it needs --role node (or api)", flag)
			}
		}
		return r, nil
	case cluster.RoleAPI:
		r.api = true
	case cluster.RoleNode:
		r.node = true
	default:
		return r, fmt.Errorf("invalid --role %q: want all, api or node", cfg.Role)
	}
	if u, err := url.Parse(cfg.Store); cfg.Store == "" || err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return r, fmt.Errorf("--role %s needs --store postgres://… (or $AIRLOCK_STORE): the cluster's state is shared in PostgreSQL", cfg.Role)
	}
	secret, err := cluster.ReadSecret(cfg.ClusterSecretFile)
	if err != nil {
		return r, err
	}
	r.secret = secret
	if cfg.ClusterTLSDir == "" {
		return r, fmt.Errorf("--role %s needs --cluster-tls-dir (or $AIRLOCK_CLUSTER_TLS_DIR): the api tier and the nodes authenticate each other with certificates of a cluster CA "+
			"(airlock cluster ca init, then airlock cluster cert; see README \"Run a cluster\"); the cluster secret alone is no longer accepted", cfg.Role)
	}
	if r.api {
		if cfg.NodeID != "" || cfg.AdvertiseAddr != "" || len(cfg.NodeLabels) > 0 || cfg.NodeCPUs != 0 || cfg.NodeMemoryMB != 0 {
			return r, errors.New("--node-id, --advertise-addr, --node-labels, --node-cpus and --node-memory are node flags: not for --role api")
		}
		if cfg.Volumes.Root != "" {
			return r, errors.New("--volume-root is a node flag: the api tier sends the volume API to the nodes that have it, and needs no mount")
		}
		if r.tls, err = clustertls.Load(cfg.ClusterTLSDir, clustertls.RoleAPI, ""); err != nil {
			return r, fmt.Errorf("--cluster-tls-dir: %w", err)
		}
		return r, nil
	}
	if r.nodeID = cfg.NodeID; r.nodeID == "" {
		host, err := os.Hostname()
		if err != nil {
			return r, fmt.Errorf("--node-id not given and the host name is unknown: %w", err)
		}
		r.nodeID = strings.ToLower(host)
	}
	if !nodeIDPattern.MatchString(r.nodeID) {
		return r, fmt.Errorf("invalid node id %q: want lower-case letters, digits, '.', '_' or '-' (at most 63)", r.nodeID)
	}
	if r.tls, err = clustertls.Load(cfg.ClusterTLSDir, clustertls.RoleNode, r.nodeID); err != nil {
		return r, fmt.Errorf("--cluster-tls-dir: %w", err)
	}
	if cfg.NodeCPUs < 0 || cfg.NodeMemoryMB < 0 {
		return r, errors.New("--node-cpus and --node-memory must not be negative")
	}
	if r.advertise, err = advertiseAddr(cfg.AdvertiseAddr, cfg.Listen); err != nil {
		return r, err
	}
	for _, l := range cfg.NodeLabels {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		if !nodeIDPattern.MatchString(l) {
			return r, fmt.Errorf("invalid --node-labels entry %q: want lower-case letters, digits, '.', '_' or '-'", l)
		}
		if !slices.Contains(r.labels, l) {
			r.labels = append(r.labels, l)
		}
	}
	return r, nil
}

// advertiseAddr is where the api tier dials a node: --advertise-addr, else
// --listen when it names an address (not 0.0.0.0 or ::).
func advertiseAddr(flag, listen string) (string, error) {
	a := flag
	if a == "" {
		a = listen
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil || port == "" || port == "0" {
		return "", fmt.Errorf("invalid --advertise-addr %q: want host:port", a)
	}
	if ip, err := netip.ParseAddr(host); host == "" || (err == nil && ip.IsUnspecified()) {
		if flag == "" {
			return "", fmt.Errorf("--listen %s names no address the api tier can dial: give --advertise-addr host:port", listen)
		}
		return "", fmt.Errorf("invalid --advertise-addr %q: want an address the api tier can dial", flag)
	} else if err == nil && ip.IsLoopback() && flag == "" {
		// Only api instances on this very machine could dial it, and an api
		// instance on another node's machine would reach that node instead.
		return "", fmt.Errorf("--listen %s is a loopback address: give --advertise-addr host:port (a loopback one only when every api instance runs on this machine)", listen)
	}
	return a, nil
}
