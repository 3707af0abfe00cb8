//go:build linux

package cli

import (
	"context"
	"github.com/airlock-sandbox/airlock/internal/activity"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlock-sandbox/airlock/internal/artifactgc"
	"github.com/airlock-sandbox/airlock/internal/daemon"
	"github.com/airlock-sandbox/airlock/internal/dnsfilter"
	"github.com/airlock-sandbox/airlock/internal/imagebuild"
	"github.com/airlock-sandbox/airlock/internal/metrics"
	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/runtime/gvisor"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// DefaultListen is the daemon's default listen address.
const DefaultListen = daemon.DefaultListen

func init() {
	register(func(root *cobra.Command) { root.AddCommand(newServeCmd()) })
}

// newServeCmd parses the flags of `airlock serve` into a daemon.Config and
// runs the daemon (internal/daemon).
func newServeCmd() *cobra.Command {
	o := &daemon.Config{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the Airlock daemon (E2B-compatible API and sandbox proxy)",
		Long: `Run the Airlock daemon: one listener serves the E2B-compatible REST API and
all sandbox traffic. On first start it builds the default templates ("base" and
"code-interpreter-v1") side by side; GET /health answers 503 until the first of
them is ready, then 200 with "building" listing the others, and a create of a
template still building waits for it (its progress in the log). Once ready it
prints the environment variables the E2B SDKs need.

On SIGTERM/SIGINT the daemon stops serving but leaves running sandboxes alone;
the next start re-attaches them (or cleans them up if they died or expired).
Use --kill-on-exit to kill every sandbox on shutdown instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			o.APIKey = flagString(cmd, "api-key")
			o.WarmPoolSet = cmd.Flags().Changed("warm-pool")
			if o.Egress.DenyOut == nil { // --deny-out= given: off, not the defaults
				o.Egress.DenyOut = []string{}
			}
			o.Stdout = cmd.OutOrStdout()
			return daemon.Run(ctx, *o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Listen, "listen", DefaultListen, "address to serve the API and sandbox traffic on")
	f.StringVar(&o.DataDir, "data-dir", firstNonEmpty(os.Getenv("AIRLOCK_DATA_DIR"), DefaultDataDir), "data directory (database, templates, sandboxes)")
	f.StringVar(&o.Store, "store", os.Getenv("AIRLOCK_STORE"), "where state is kept: empty for SQLite in the data directory (the default), or postgres://user[:password]@host:port/database?sslmode=… for PostgreSQL (default $AIRLOCK_STORE; the password may come from $PGPASSWORD instead, out of sight of ps); one --role all daemon per database (a second one is refused); the cluster roles need it")
	f.StringVar(&o.EnvdPath, "envd-path", "", "path of the airlock-envd agent binary (default: next to this executable, else $PATH)")
	f.StringVar(&o.Runtime, "runtime", "auto", "isolation runtime: auto (a microVM on hardware KVM, else gvisor), microvm (emulated without KVM) or gvisor")
	f.StringVar(&o.MicrovmKernel, "microvm-kernel", "", "guest kernel for microVMs (default: newest built by scripts/build-kernel.sh)")
	addGVisorFlags(f, &o.GVisor)
	f.StringVar(&o.Domain, "domain", "", "sandbox domain returned to SDKs; sandboxes are then reached as <port>-<id>.<domain> (optional)")
	f.StringVar(&o.Subnet, "subnet", network.DefaultSubnet, "IPv4 pool for sandbox addresses")
	addLimitFlags(f, &o.Limits)
	addEgressFlags(f, &o.Egress)
	addBuildFlags(f, &o.Builds)
	addEventFlags(f, &o.Events)
	f.StringVar(&o.Volumes.Backing, "volume-backing", "auto", "where this node keeps volumes' data: loop (a sparse ext4 image per volume under --data-dir/volumes, loop-mounted; its size is the volume's limit), auto (loop where the host has loop devices and mkfs.ext4, else none with a warning), dir (a plain directory per volume under --data-dir/volumes, or under --volume-root; its size is a limit of the volume content API only) or none (no volumes)")
	f.StringVar(&o.Volumes.Root, "volume-root", "", "a directory on a filesystem every node of a cluster mounts (NFS, CephFS, EFS, a ReadWriteMany volume; it must exist): volumes are directories under it (the dir backing), usable from every node at once; a --role node daemon without it has no volumes")
	f.IntVar(&o.Volumes.DefaultSizeMB, "volume-size-default", daemon.DefaultVolumeSizeMB, "size in MiB of a volume whose create names none (its writers get ENOSPC beyond it)")
	f.BoolVar(&o.Volumes.BucketAllowPrivate, "volume-bucket-allow-private", false, "let bucket volumes name S3 endpoints on loopback, private, link-local or this host's addresses (refused by default, so a bucket endpoint is no way into the operator's network)")
	f.StringVar(&o.SecretsKeyFile, "secrets-key-file", os.Getenv("AIRLOCK_SECRETS_KEY_FILE"), "file holding the key (64 hex digits, mode 0600) that seals credentials kept in the store, such as bucket volumes' and webhook signing secrets (default $AIRLOCK_SECRETS_KEY_FILE, else --data-dir/secrets.key, generated at first start); keep it with backups of the store, and the same on every daemon of a cluster")
	f.IntVar(&o.Volumes.MaxSizeMB, "volume-size-max", daemon.DefaultVolumeMaxSizeMB, "largest size in MiB a volume create may ask for (its sizeMB, an Airlock extension)")
	f.DurationVar(&o.MetricsInterval, "metrics-interval", metrics.DefaultInterval, "how often each sandbox's CPU, memory and disk use is sampled")
	f.StringVar(&o.NetPrefix, "net-prefix", network.DefaultNamePrefix, "name prefix of network namespaces, host veths and the nftables table (two daemons on one host need different prefixes and subnets, neither prefix the start of the other)")
	f.StringVar(&o.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&o.LogFormat, "log-format", "text", "log format: text or json")
	f.BoolVar(&o.KillOnExit, "kill-on-exit", false, "kill all sandboxes when the daemon shuts down")
	f.StringVar(&o.Artifacts, "artifacts", "", "artifact store for templates and snapshots shared by several hosts: s3://bucket/prefix (any S3-compatible store; endpoint, credentials and region from $AIRLOCK_S3_ENDPOINT, $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY, $AWS_REGION) or a directory; checked at start (default: none, everything stays in --data-dir)")
	f.DurationVar(&o.ArtifactGCInterval, "artifact-gc-interval", artifactgc.DefaultInterval, "--role api with --artifacts: how often the artifact store is collected (manifests no row references and the trees only they named, once older than an hour; one api instance at a time, first pass 5 minutes after start); 0 turns it off")
	f.BoolVar(&o.BootSnapshots, "boot-snapshots", true, "boot each default template once, snapshot it (with warm interpreter contexts) and serve creates by restoring that snapshot (runtimes that can checkpoint; falls back to a cold boot)")
	f.StringToIntVar(&o.WarmPool, "warm-pool", nil, "keep N restored, unclaimed sandboxes per template for the fastest creates, e.g. code-interpreter-v1=2 (needs --boot-snapshots); default: code-interpreter-v1 gets an automatic pool sized from the last minute's creates (1 to 4) while the host has memory to spare; code-interpreter-v1=0 turns it off")
	f.StringVar(&o.Role, "role", "all", "cluster role: all (one host: API, proxy and sandboxes, the default), api (stateless api tier: the E2B API and sandbox proxy for every node, placement; needs --store postgres://…, the cluster secret and --cluster-tls-dir) or node (runs sandboxes for the api tier; same needs)")
	f.StringVar(&o.NodeID, "node-id", "", "--role node: this node's id in the cluster (default: the host name)")
	f.StringVar(&o.AdvertiseAddr, "advertise-addr", "", "--role node: host:port where the api tier reaches this node (default: --listen, when it names an address)")
	f.StringVar(&o.ClusterSecretFile, "cluster-secret-file", "", "--role api and node: file holding the cluster secret (at least 16 characters) the api tier sends nodes inside the mutual TLS connection, a second factor besides its certificate (default: $AIRLOCK_CLUSTER_SECRET)")
	f.StringVar(&o.ClusterTLSDir, "cluster-tls-dir", os.Getenv("AIRLOCK_CLUSTER_TLS_DIR"), "--role api and node: directory with the cluster CA (ca.crt) and this daemon's certificate: node.crt and node.key for a node (naming its --node-id), api.crt and api.key for the api tier (airlock cluster cert); the api tier and the nodes authenticate each other with them (mutual TLS) (default $AIRLOCK_CLUSTER_TLS_DIR)")
	f.StringSliceVar(&o.NodeLabels, "node-labels", nil, "--role node: labels placement can require, e.g. gpu,ssd (\"kvm\" is added on a KVM host)")
	f.IntVar(&o.NodeCPUs, "node-cpus", 0, "--role node: sandbox CPUs this node takes in total, for placement and its own admission (default: host CPUs × 4; a sandbox's CPUs are a share and a ceiling, and most idle)")
	f.BoolVar(&o.DrainOnStop, "drain-on-stop", true, "--role node with --artifacts: on SIGTERM/SIGINT, stop placement here and pause every running sandbox into the artifact store before exiting, so that the api tier resumes each on another node at its next request (false: leave them running, to re-attach them after a restart)")
	f.IntVar(&o.NodeMemoryMB, "node-memory", 0, "--role node: sandbox memory in MiB this node takes in total (default: host memory less the warm pool's reserve)")
	f.StringSliceVar(&o.Templates, "templates", []string{"base", "code-interpreter-v1"}, "built-in templates to build (once, cached, side by side); the daemon serves once the first is ready, and a create of one still building waits for it")
	return cmd
}

func addGVisorFlags(f *pflag.FlagSet, g *daemon.GVisor) {
	f.StringVar(&g.Runsc, "runsc", "", "runsc binary of the gvisor runtime (default: the pinned build of scripts/build-runsc.sh, "+gvisor.DefaultRunscPath()+")")
	f.StringVar(&g.Platform, "runsc-platform", "auto", "runsc platform: auto (systrap when a probe sandbox starts on it, else ptrace), systrap or ptrace")
}

func addLimitFlags(f *pflag.FlagSet, l *daemon.Limits) {
	f.IntVar(&l.CPU, "default-cpu-count", sandbox.DefaultCPUCount, "CPUs of a sandbox when the create request names none")
	f.IntVar(&l.MemoryMB, "default-memory-mb", sandbox.DefaultMemoryMB, "memory of a sandbox in MiB when the create request names none (exceeding it stops the sandbox)")
	f.IntVar(&l.DiskMB, "default-disk-mb", sandbox.DefaultDiskSizeMB, "size in MiB of a sandbox's writable layer when the create request names none")
	f.IntVar(&l.PIDs, "default-max-processes", sandbox.DefaultPIDs, "processes per user inside a sandbox (RLIMIT_NPROC) when the create request names none")
	f.IntVar(&l.OpenFiles, "default-max-open-files", sandbox.DefaultOpenFiles, "open files per process inside a sandbox (RLIMIT_NOFILE) when the create request names none")
	f.IntVar(&l.MaxCPU, "max-cpu-count", sandbox.DefaultMaxCPUCount, "largest cpuCount a create request may ask for")
	f.IntVar(&l.MaxMemoryMB, "max-memory-mb", sandbox.DefaultMaxMemoryMB, "largest memoryMB a create request may ask for")
	f.IntVar(&l.MaxDiskMB, "max-disk-mb", sandbox.DefaultMaxDiskMB, "largest diskSizeMB a create request may ask for")
	f.IntVar(&l.DiskReserveMB, "disk-reserve-mb", sandbox.DefaultDiskReserveMB, "free space in MiB the data dir's filesystem must keep: below it creates, pauses, forks and uploads answer 507 (-1: refuse only when completely full)")
}

func addBuildFlags(f *pflag.FlagSet, b *daemon.Builds) {
	f.StringSliceVar(&b.RegistryAllow, "registry-allow", nil,
		"addresses (IP, CIDR or ip:port) a template build's FROM may pull from although sandboxes may not reach them: a registry on this host's loopback or in a private network (by default FROM connects to neither, nor to --deny-out ranges or this host's addresses)")
	f.StringVar(&b.ImageDir, "image-dir", "",
		"directory that FROM oci-layout:///… and docker-archive:///… images must be in (default: none, local images are refused)")
	f.IntVar(&b.MaxImageMB, "max-image-mb", imagebuild.DefaultMaxImageBytes>>20,
		"most a template build's FROM image may pull and unpack, in MiB")
}

func addEgressFlags(f *pflag.FlagSet, e *daemon.Egress) {
	var deny []string
	for _, p := range network.DefaultDenyOut {
		deny = append(deny, p.String())
	}
	f.StringSliceVar(&e.DenyOut, "deny-out", deny,
		"IPv4 ranges no sandbox may reach, whatever its allowOut says (private networks by default); \"none\" or an empty value turns the list off")
	f.StringSliceVar(&e.DenyOutExcept, "deny-out-except", nil,
		"IPv4 ranges carved out of --deny-out for every sandbox (e.g. an internal package mirror); each sandbox's own network policy still applies there")
	f.StringSliceVar(&e.DNSUpstreams, "dns-upstream", dnsfilter.HostResolvers("/etc/resolv.conf"),
		"resolvers (ip or ip:port) that the DNS filter of sandboxes with domain rules forwards allowed queries to (default: the host's /etc/resolv.conf)")
	f.StringVar(&e.ProxyUpstreamCA, "egress-proxy-upstream-ca", "",
		"PEM file of CAs the egress proxy (network.rules) trusts for upstream servers, besides the system roots")
	f.BoolVar(&e.ProxyAllowPrivate, "egress-proxy-allow-private", false,
		"accept a sandbox's network.egressProxy (SOCKS5 upstream) at a private or internal address, which is refused by default")
	f.IntVar(&e.AuditGroup, "audit-nflog-group", 0,
		"NFLOG group for the egress audit log of connections (1-65535; default derived from --net-prefix, -1 turns it off; two daemons on a host need different groups)")
	f.IntVar(&e.ApprovalQueue, "approval-queue", 0,
		"NFQUEUE number the egress approval hook (network.approval) holds new connections on (1-65535; default derived from --net-prefix, -1 turns the hook off; two daemons on a host need different numbers)")
	f.IntVar(&e.ActivityMaxEntries, "activity-max-entries", activity.DefaultMaxEntries,
		"entries each sandbox's activity feed (GET /sandboxes/{id}/activity, airlock watch) keeps in memory and on disk; 0 turns the feed off")
	f.DurationVar(&e.ActivityMaxAge, "activity-max-age", activity.DefaultMaxAge,
		"oldest activity feed entry a sandbox keeps")
}
