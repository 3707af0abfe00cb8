#!/usr/bin/env bash
# Starts (and stops) an Airlock cluster on one machine, to try the cluster
# roles and to test them (scripts/test.sh's "cluster e2e" stage, test/cluster):
#
#   - a throwaway PostgreSQL (Debian's postgresql 15: initdb, a loopback port,
#     password authentication) holding the shared state;
#   - three `airlock serve --role node` daemons n1, n2, n3, each with its own
#     data dir, net prefix (acl1, acl2, acl3) and subnet (10.84.0.0/18,
#     10.84.64.0/18, 10.84.128.0/18);
#   - two `airlock serve --role api` instances;
#   - haproxy in front of the two api instances (roundrobin, health-checked,
#     fast failover): the one URL the E2B SDKs use.
#
# Usage (as root, after scripts/setup.sh has built bin/airlock):
#   scripts/run-cluster.sh up   [--state DIR] [--seed-templates DATA_DIR]
#                               [--artifacts s3://bucket/prefix|DIR]
#                               [--volume-root DIR|none]
#                               [--node-args "ARGS"] [--api-args "ARGS"]
#   scripts/run-cluster.sh env  [--state DIR]     # prints the env file; source it
#   scripts/run-cluster.sh down [--state DIR] [--purge]
#
# --state DIR (default /var/lib/airlock-cluster, or $AIRLOCK_CLUSTER_STATE):
#   everything lives there: nodes/<id>/ and api/<n>/ (data dirs), pg/ (the
#   database), logs/<name>.log, pids/<name>.pid, cmd/<name> (the exact command
#   that started each daemon: run it again to restart that one; the tests do),
#   cluster-secret (0600), api-key, haproxy.cfg, env, and tls/: the cluster CA
#   (tls/ca, made with `airlock cluster ca init`) and the TLS directory of each
#   node and of the api tier (tls/<node>, tls/api: `airlock cluster cert`), which
#   the daemons get as --cluster-tls-dir (mutual TLS between the tiers).
# --seed-templates DATA_DIR: hard-link (cp -al) DATA_DIR/templates, the built
#   templates of another daemon's data dir, into each node's data dir instead of
#   building them (building base and code-interpreter-v1 takes minutes a node).
#   Without it n1 builds them and n2, n3 are seeded from n1 before they start.
# --artifacts s3://bucket/prefix or DIR: the artifact store every node and api
#   instance uses (`airlock serve --artifacts`): templates built on one node are
#   pulled by the others, and creates are placed on any node. The S3 endpoint and
#   credentials come from $AIRLOCK_S3_ENDPOINT, $AWS_ACCESS_KEY_ID,
#   $AWS_SECRET_ACCESS_KEY and $AWS_REGION, passed on to the daemons.
# --volume-root DIR (default STATE/shared-volumes) or none: the directory every
#   node gets as `airlock serve --volume-root`, the filesystem the nodes share
#   for volumes (issue 27): each volume is a directory under it, and a sandbox
#   on any node mounts it. On one machine it is one host directory given to
#   every node: this VM's kernel has neither an NFS server (no nfsd) nor an NFS
#   client (docs/DECISIONS.md, 2026-11-28). On real hosts, mount the shared
#   filesystem (NFS, CephFS, EFS) at the same path on each and name it here.
#   none: the nodes have no volumes.
# --node-args / --api-args: extra `airlock serve` flags for every node / api
#   instance, e.g. --node-args "--boot-snapshots=false --warm-pool code-interpreter-v1=0".
# --purge (down): also delete the state dir.
#
# Installs Debian's postgresql and haproxy when missing.
# Environment: AIRLOCK_CLUSTER_BIN (the airlock binary, default bin/airlock),
# AIRLOCK_CLUSTER_HEALTH_WAIT (seconds to wait for each daemon, default 1200:
# a first start builds templates). To run a second cluster on the same host,
# give it its own state dir and these (space-separated, one per node / api
# instance; no prefix may start another daemon's):
# AIRLOCK_CLUSTER_NET_PREFIXES (default "acl1 acl2 acl3"),
# AIRLOCK_CLUSTER_SUBNETS (default "10.84.0.0/18 10.84.64.0/18 10.84.128.0/18"),
# AIRLOCK_CLUSTER_API_NET_PREFIXES (default "aca1 aca2"). `down` reads the
# node prefixes from the state dir's env file.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)

PG_BIN=/usr/lib/postgresql/15/bin
NODES=(n1 n2 n3)
read -r -a PREFIXES <<<"${AIRLOCK_CLUSTER_NET_PREFIXES:-acl1 acl2 acl3}"
read -r -a SUBNETS <<<"${AIRLOCK_CLUSTER_SUBNETS:-10.84.0.0/18 10.84.64.0/18 10.84.128.0/18}"
APIS=(api1 api2)
read -r -a API_PREFIXES <<<"${AIRLOCK_CLUSTER_API_NET_PREFIXES:-aca1 aca2}"
[ "${#PREFIXES[@]}" -eq "${#NODES[@]}" ] && [ "${#SUBNETS[@]}" -eq "${#NODES[@]}" ] && [ "${#API_PREFIXES[@]}" -eq "${#APIS[@]}" ] || {
	printf 'run-cluster: AIRLOCK_CLUSTER_NET_PREFIXES and AIRLOCK_CLUSTER_SUBNETS need %d entries, AIRLOCK_CLUSTER_API_NET_PREFIXES %d\n' "${#NODES[@]}" "${#APIS[@]}" >&2
	exit 1
}

log() { printf '==> %s\n' "$*"; }
die() {
	printf 'run-cluster: %s\n' "$*" >&2
	exit 1
}

usage() {
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
	exit "${1:-0}"
}

cmd=${1:-}
[ -n "$cmd" ] || usage 2
shift
STATE=${AIRLOCK_CLUSTER_STATE:-/var/lib/airlock-cluster}
SEED=""
NODE_ARGS=""
API_ARGS=""
ARTIFACTS=""
VOLUME_ROOT=""
PURGE=0
while [ $# -gt 0 ]; do
	case "$1" in
	--state) STATE=${2:?--state needs a directory}; shift 2 ;;
	--state=*) STATE=${1#*=}; shift ;;
	--seed-templates) SEED=${2:?--seed-templates needs a data dir}; shift 2 ;;
	--seed-templates=*) SEED=${1#*=}; shift ;;
	--node-args) NODE_ARGS=${2?}; shift 2 ;;
	--node-args=*) NODE_ARGS=${1#*=}; shift ;;
	--artifacts) ARTIFACTS=${2:?--artifacts needs s3://bucket/prefix or a directory}; shift 2 ;;
	--artifacts=*) ARTIFACTS=${1#*=}; shift ;;
	--volume-root) VOLUME_ROOT=${2:?--volume-root needs a directory or none}; shift 2 ;;
	--volume-root=*) VOLUME_ROOT=${1#*=}; shift ;;
	--api-args) API_ARGS=${2?}; shift 2 ;;
	--api-args=*) API_ARGS=${1#*=}; shift ;;
	--purge) PURGE=1; shift ;;
	-h | --help) usage 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done
STATE=$(realpath -m "$STATE")
BIN=${AIRLOCK_CLUSTER_BIN:-$ROOT/bin/airlock}
HEALTH_WAIT=${AIRLOCK_CLUSTER_HEALTH_WAIT:-1200}

# ------------------------------------------------------------------ helpers

pid_of() { # pid_of NAME: the pid in pids/NAME.pid if that process runs
	local pid
	pid=$(tr -d ' \n' 2>/dev/null <"$STATE/pids/$1.pid") || return 1
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

free_port() { # a free loopback TCP port not in USED_PORTS
	local p
	while :; do
		p=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
		case " ${USED_PORTS:-} " in *" $p "*) continue ;; esac
		USED_PORTS="${USED_PORTS:-} $p"
		echo "$p"
		return
	done
}

rand_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }

# write_cmd NAME LOG ENV-ASSIGNMENTS... -- COMMAND...: writes cmd/NAME, a
# script that starts COMMAND in the background (its own session, stdin
# /dev/null, appending to LOG) with the environment given, and writes its pid
# to pids/NAME.pid. It refuses to start a second copy.
write_cmd() {
	local name=$1 logf=$2 f
	shift 2
	f="$STATE/cmd/$name"
	{
		echo '#!/usr/bin/env bash'
		echo "# Starts $name of the cluster in $STATE (written by scripts/run-cluster.sh up)."
		echo "# Run it again to restart $name after it stopped; it refuses while $name runs."
		echo 'set -euo pipefail'
		printf 'name=%q\npidfile=%q\n' "$name" "$STATE/pids/$name.pid"
		cat <<'EOF'
if pid=$(tr -d ' \n' 2>/dev/null <"$pidfile") && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
	echo "$name already runs (pid $pid)" >&2
	exit 1
fi
EOF
		while [ "$1" != -- ]; do
			printf 'export %q\n' "$1"
			shift
		done
		shift
		echo 'cd /'
		printf 'setsid'
		printf ' %q' "$@"
		printf ' </dev/null >>%q 2>&1 &\n' "$logf"
		cat <<'EOF'
echo $! >"$pidfile"
EOF
	} >"$f"
	chmod 0700 "$f"
}

start() { # start NAME: runs cmd/NAME
	bash "$STATE/cmd/$1"
	log "started $1 (pid $(cat "$STATE/pids/$1.pid"), log $STATE/logs/$1.log)"
}

# wait_health NAME URL [JQ-LIKE CHECK]: waits until GET URL answers 200 (and
# the body matches the extended regexp $3, if given), showing the daemon's
# new log lines meanwhile. Fails if the daemon exits or the wait times out.
wait_health() {
	local name=$1 url=$2 want=${3:-} logf="$STATE/logs/$1.log" off=0 size body start
	start=$(date +%s)
	while :; do
		if [ -s "$logf" ]; then
			size=$(stat -c %s "$logf")
			if [ "$size" -gt "$off" ]; then
				tail -c +$((off + 1)) "$logf" | head -c $((size - off)) | sed "s/^/[$name] /"
				off=$size
			fi
		fi
		if body=$(curl -fsS -m 2 --cacert "$STATE/tls/ca/ca.crt" "$url" 2>/dev/null); then
			if [ -z "$want" ] || grep -qE "$want" <<<"$body"; then
				log "$name healthy after $(($(date +%s) - start))s: $body"
				return 0
			fi
		fi
		pid_of "$name" >/dev/null || die "$name exited before becoming healthy (log: $logf)"
		[ $(($(date +%s) - start)) -lt "$HEALTH_WAIT" ] || die "$name not healthy after ${HEALTH_WAIT}s (log: $logf)"
		sleep 1
	done
}

seed_templates() { # seed_templates FROM_DATA_DIR TO_DATA_DIR
	local d n
	mkdir -p "$2/templates"
	for d in "$1"/templates/*/; do
		[ -f "$d/meta.json" ] || continue
		n=$(basename "$d")
		[ -e "$2/templates/$n" ] && continue
		# Hard links: templates are immutable, named by their content hash.
		cp -al "$d" "$2/templates/$n" 2>/dev/null || cp -a "$d" "$2/templates/$n"
	done
}

# pg_dir: where the database lives. $STATE/pg if the postgres user can reach
# it, else a directory under /tmp (PostgreSQL refuses to run as root, and
# the state dir may sit under a directory private to root).
pg_dir() {
	if [ -s "$STATE/pg.dir" ]; then
		cat "$STATE/pg.dir"
	else
		echo "$STATE/pg"
	fi
}

as_postgres() { runuser -u postgres -- "$@"; }

# ------------------------------------------------------------------ up

up() {
	[ "$(id -u)" -eq 0 ] || die "must run as root (nodes need gVisor, network namespaces and nftables)"
	[ -x "$BIN" ] || die "$BIN missing: run scripts/setup.sh first"
	local missing=()
	[ -x "$PG_BIN/initdb" ] || missing+=(postgresql)
	command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)
	if [ "${#missing[@]}" -gt 0 ]; then
		log "installing ${missing[*]} (Debian packages)"
		# Only this script's throwaway database: no default cluster of the package.
		if [ ! -e /etc/postgresql-common/createcluster.d/airlock-tests.conf ] && [ ! -d /etc/postgresql ]; then
			mkdir -p /etc/postgresql-common/createcluster.d
			echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/airlock-cluster.conf
		fi
		{ DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; } ||
			die "installing ${missing[*]} failed"
	fi
	[ -x "$PG_BIN/initdb" ] || die "PostgreSQL 15 missing in $PG_BIN: apt-get install postgresql (Debian 12)"
	id postgres >/dev/null 2>&1 || die "the postgres user is missing (it comes with Debian's postgresql package)"
	command -v python3 >/dev/null 2>&1 || die "python3 is needed (to pick free ports)"
	if [ -n "$SEED" ]; then
		SEED=$(realpath "$SEED")
		compgen -G "$SEED/templates/*/meta.json" >/dev/null || die "--seed-templates $SEED: no built templates in $SEED/templates"
	fi
	local n
	for n in "${NODES[@]}" "${APIS[@]}" haproxy; do
		if pid_of "$n" >/dev/null; then
			die "a cluster already runs in $STATE ($n: pid $(pid_of "$n")); run: $0 down --state $STATE"
		fi
	done
	local p
	for p in "${PREFIXES[@]}"; do
		# Leftovers of an earlier run that was not taken down.
		nft delete table inet "$p" 2>/dev/null || true
	done

	# 0711: the postgres user may pass through to pg/ (PostgreSQL refuses to
	# run as root); what is secret is private to root (logs/ and cmd/ hold
	# the API key and the database's password).
	mkdir -p "$STATE"/{logs,pids,cmd,nodes,api}
	chmod 0711 "$STATE"
	chmod 0700 "$STATE/logs" "$STATE/cmd"
	rm -f "$STATE"/pids/*.pid

	# ---------------------------------------------------------- secrets
	local secret_file="$STATE/cluster-secret" key_file="$STATE/api-key" api_key
	if [ ! -s "$secret_file" ]; then
		(umask 077 && rand_hex 32 >"$secret_file")
	fi
	chmod 0600 "$secret_file"
	# One --secrets-key-file for every daemon: the nodes seal credentials
	# (webhook secrets, bucket credentials, /secrets) that the api tier and
	# the other nodes open.
	local secrets_key="$STATE/secrets.key"
	if [ ! -s "$secrets_key" ]; then
		(umask 077 && rand_hex 32 >"$secrets_key")
	fi
	chmod 0600 "$secrets_key"
	if [ ! -s "$key_file" ]; then
		(umask 077 && echo "e2b_$(rand_hex 20)" >"$key_file")
	fi
	api_key=$(cat "$key_file")

	# ---------------------------------------------------------- TLS
	# The cluster CA and one certificate per node (its identity, for server
	# authentication) and for the api tier (client authentication): every
	# api → node request is mutual TLS. Kept across runs; the CA key stays
	# in tls/ca, never in a daemon's directory.
	local tls="$STATE/tls"
	mkdir -p "$tls"
	chmod 0700 "$tls"
	if [ ! -s "$tls/ca/ca.crt" ]; then
		"$BIN" cluster ca init --dir "$tls/ca" >/dev/null || die "creating the cluster CA in $tls/ca failed"
	fi
	if [ ! -s "$tls/api/api.crt" ]; then
		"$BIN" cluster cert --ca "$tls/ca" --api --out "$tls/api" >/dev/null || die "issuing the api tier's certificate failed"
	fi

	# ---------------------------------------------------------- PostgreSQL
	local pgdir pgdata pg_port pg_pass store
	pgdir=$(pg_dir)
	if [ ! -d "$pgdir/data" ]; then
		rm -f "$STATE/pg.dir"
		if as_postgres test -x "$STATE"; then
			pgdir="$STATE/pg"
			mkdir -p "$pgdir"
		else
			pgdir=$(mktemp -d /tmp/airlock-cluster-pg.XXXXXX)
			echo "$pgdir" >"$STATE/pg.dir"
		fi
		chown postgres: "$pgdir"
		chmod 0700 "$pgdir"
		pg_pass=$(rand_hex 16)
		(umask 077 && printf '%s\n' "$pg_pass" >"$pgdir/pwfile")
		chown postgres: "$pgdir/pwfile"
		log "initdb $pgdir/data"
		as_postgres "$PG_BIN/initdb" -D "$pgdir/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
			--pwfile="$pgdir/pwfile" --no-locale -E UTF8 --no-sync >"$STATE/logs/initdb.log" 2>&1 ||
			die "initdb failed: $(tail -n 20 "$STATE/logs/initdb.log")"
		# Loopback only, a socket in the database's own dir, and the settings of
		# a throwaway database (durability buys nothing here).
		pg_port=$(free_port)
		cat >>"$pgdir/data/postgresql.conf" <<EOF

# scripts/run-cluster.sh
listen_addresses = '127.0.0.1'
port = $pg_port
unix_socket_directories = '$pgdir'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
logging_collector = off
EOF
	fi
	pgdata="$pgdir/data"
	pg_pass=$(cat "$pgdir/pwfile")
	pg_port=$(sed -n 's/^port = \([0-9]*\)$/\1/p' "$pgdata/postgresql.conf" | tail -n 1)
	touch "$pgdir/postgres.log"
	chown postgres: "$pgdir/postgres.log"
	ln -sfn "$pgdir/postgres.log" "$STATE/logs/postgres.log"
	log "starting PostgreSQL on 127.0.0.1:$pg_port"
	as_postgres "$PG_BIN/pg_ctl" -D "$pgdata" -l "$pgdir/postgres.log" -w -t 60 start >/dev/null ||
		die "PostgreSQL did not start: $(tail -n 20 "$pgdir/postgres.log")"
	as_postgres cat "$pgdata/postmaster.pid" | head -n 1 >"$STATE/pids/postgres.pid"
	if ! as_postgres "$PG_BIN/psql" -h "$pgdir" -p "$pg_port" -U postgres -d postgres -tAc \
		"SELECT 1 FROM pg_database WHERE datname = 'airlock'" 2>/dev/null | grep -q 1; then
		as_postgres "$PG_BIN/psql" -h "$pgdir" -p "$pg_port" -U postgres -d postgres -q \
			-c "CREATE ROLE airlock LOGIN PASSWORD '$pg_pass'" -c "CREATE DATABASE airlock OWNER airlock" ||
			die "creating the airlock database failed"
	fi
	store="postgres://airlock:$pg_pass@127.0.0.1:$pg_port/airlock?sslmode=disable"
	# The exact PostgreSQL restart the fault tests use (a fast shutdown, then up).
	{
		echo '#!/usr/bin/env bash'
		echo "# Restarts the cluster's PostgreSQL (fast shutdown: clients are disconnected)."
		echo 'set -euo pipefail'
		printf 'runuser -u postgres -- %q -D %q -l %q -m fast -w -t 60 restart\n' "$PG_BIN/pg_ctl" "$pgdata" "$pgdir/postgres.log"
		printf 'runuser -u postgres -- head -n 1 %q >%q\n' "$pgdata/postmaster.pid" "$STATE/pids/postgres.pid"
	} >"$STATE/cmd/postgres-restart"
	chmod 0700 "$STATE/cmd/postgres-restart"

	# ---------------------------------------------------------- commands
	local -a node_extra api_extra s3_env=()
	read -r -a node_extra <<<"$NODE_ARGS"
	read -r -a api_extra <<<"$API_ARGS"
	if [ -n "$ARTIFACTS" ]; then
		case "$ARTIFACTS" in
		s3://*) ;;
		*) ARTIFACTS=$(realpath -m "$ARTIFACTS") && mkdir -p "$ARTIFACTS" ;;
		esac
		node_extra=(--artifacts "$ARTIFACTS" "${node_extra[@]}")
		api_extra=(--artifacts "$ARTIFACTS" "${api_extra[@]}")
		local v
		for v in AIRLOCK_S3_ENDPOINT AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION; do
			if [ -n "${!v:-}" ]; then s3_env+=("$v=${!v}"); fi
		done
	fi
	# The nodes' shared volume root (--volume-root above).
	case "${VOLUME_ROOT:=$STATE/shared-volumes}" in
	none) VOLUME_ROOT="" ;;
	*)
		VOLUME_ROOT=$(realpath -m "$VOLUME_ROOT") && mkdir -p "$VOLUME_ROOT"
		node_extra=(--volume-root "$VOLUME_ROOT" "${node_extra[@]}")
		;;
	esac
	local i node_ports=() api_ports=() hp_port
	for i in "${!NODES[@]}"; do node_ports+=("$(free_port)"); done
	for i in "${!APIS[@]}"; do api_ports+=("$(free_port)"); done
	hp_port=$(free_port)

	for i in "${!NODES[@]}"; do
		n=${NODES[$i]}
		# A node's certificate names its id and its address (a new port each
		# run: issued again).
		"$BIN" cluster cert --ca "$tls/ca" --node "$n" --addr "127.0.0.1:${node_ports[$i]}" --out "$tls/$n" >/dev/null ||
			die "issuing $n's certificate failed"
		mkdir -p "$STATE/nodes/$n"
		# --kill-on-exit: `down` leaves no sandbox behind.
		write_cmd "$n" "$STATE/logs/$n.log" "AIRLOCK_STORE=$store" "${s3_env[@]}" -- \
			"$BIN" serve --role node --node-id "$n" \
			--listen "127.0.0.1:${node_ports[$i]}" --advertise-addr "127.0.0.1:${node_ports[$i]}" \
			--data-dir "$STATE/nodes/$n" --net-prefix "${PREFIXES[$i]}" --subnet "${SUBNETS[$i]}" \
			--cluster-secret-file "$secret_file" --secrets-key-file "$secrets_key" --cluster-tls-dir "$tls/$n" --kill-on-exit "${node_extra[@]}"
	done
	for i in "${!APIS[@]}"; do
		n=${APIS[$i]}
		mkdir -p "$STATE/api/$n"
		write_cmd "$n" "$STATE/logs/$n.log" "AIRLOCK_STORE=$store" "AIRLOCK_API_KEY=$api_key" "${s3_env[@]}" -- \
			"$BIN" serve --role api --listen "127.0.0.1:${api_ports[$i]}" --data-dir "$STATE/api/$n" \
			--net-prefix "${API_PREFIXES[$i]}" --cluster-secret-file "$secret_file" --secrets-key-file "$secrets_key" --cluster-tls-dir "$tls/api" "${api_extra[@]}"
	done

	# haproxy: round robin over the api tier; a dead instance is out within
	# ~2 s (two failed checks a second apart), and a request that cannot
	# connect to it is retried on the other one (redispatch).
	cat >"$STATE/haproxy.cfg" <<EOF
# Written by scripts/run-cluster.sh: the balancer in front of the api tier.
global
	log stderr format raw local0 info
	maxconn 4096

defaults
	mode http
	log global
	option httplog
	option dontlognull
	option redispatch 1
	retries 3
	timeout connect 2s
	# Inactivity bounds; a command's output stream may be quiet for long.
	timeout client 1h
	timeout server 1h
	# Streams (commands, PTY, watchers) and WebSockets stay open for long.
	timeout tunnel 2h
	timeout http-keep-alive 30s
	timeout queue 10s

frontend e2b
	bind 127.0.0.1:$hp_port
	default_backend airlock_api

backend airlock_api
	balance roundrobin
	option httpchk GET /health
	http-check expect status 200
	default-server inter 1s fastinter 500ms downinter 1s fall 2 rise 1
$(for i in "${!APIS[@]}"; do printf '\tserver %s 127.0.0.1:%s check\n' "${APIS[$i]}" "${api_ports[$i]}"; done)
EOF
	haproxy -c -q -f "$STATE/haproxy.cfg" || die "haproxy rejects $STATE/haproxy.cfg"
	write_cmd haproxy "$STATE/logs/haproxy.log" -- "$(command -v haproxy)" -db -f "$STATE/haproxy.cfg"

	# ---------------------------------------------------------- env
	local hp_url="http://127.0.0.1:$hp_port"
	{
		echo "# The Airlock cluster in $STATE (scripts/run-cluster.sh up): source this file."
		echo "export E2B_API_URL=$hp_url"
		echo "export E2B_SANDBOX_URL=$hp_url"
		echo "export E2B_VOLUME_API_URL=$hp_url"
		echo "export E2B_API_KEY=$api_key"
		printf 'export AIRLOCK_CLUSTER_STATE=%q\n' "$STATE"
		for i in "${!APIS[@]}"; do
			echo "export AIRLOCK_CLUSTER_$(tr '[:lower:]' '[:upper:]' <<<"${APIS[$i]}")=http://127.0.0.1:${api_ports[$i]}"
		done
		echo "export AIRLOCK_CLUSTER_NODES='${NODES[*]}'"
		for i in "${!NODES[@]}"; do
			echo "export AIRLOCK_CLUSTER_NODE_$(tr '[:lower:]' '[:upper:]' <<<"${NODES[$i]}")=https://127.0.0.1:${node_ports[$i]}"
			echo "export AIRLOCK_CLUSTER_PREFIX_$(tr '[:lower:]' '[:upper:]' <<<"${NODES[$i]}")=${PREFIXES[$i]}"
		done
		echo "export AIRLOCK_CLUSTER_PG_URL='$store'"
		printf 'export AIRLOCK_CLUSTER_PGDATA=%q\n' "$pgdata"
		printf 'export AIRLOCK_CLUSTER_SECRET_FILE=%q\n' "$secret_file"
		printf 'export AIRLOCK_CLUSTER_TLS=%q\n' "$tls"
		printf 'export AIRLOCK_CLUSTER_PIDS=%q\n' "$STATE/pids"
		printf 'export AIRLOCK_CLUSTER_CMDS=%q\n' "$STATE/cmd"
		printf 'export AIRLOCK_CLUSTER_LOGS=%q\n' "$STATE/logs"
		printf 'export AIRLOCK_CLUSTER_BIN=%q\n' "$BIN"
		printf 'export AIRLOCK_CLUSTER_ARTIFACTS=%q\n' "$ARTIFACTS"
		printf 'export AIRLOCK_CLUSTER_VOLUME_ROOT=%q\n' "$VOLUME_ROOT"
	} >"$STATE/env"
	chmod 0600 "$STATE/env"

	# ---------------------------------------------------------- start
	if [ -n "$SEED" ]; then
		for n in "${NODES[@]}"; do
			log "seeding $n's templates from $SEED (hard links)"
			seed_templates "$SEED" "$STATE/nodes/$n"
		done
		for n in "${NODES[@]}"; do start "$n"; done
	else
		log "n1 builds the default templates (minutes on the first run); n2 and n3 are seeded from it"
		start n1
		wait_health n1 "https://127.0.0.1:${node_ports[0]}/health"
		for n in "${NODES[@]:1}"; do
			seed_templates "$STATE/nodes/n1" "$STATE/nodes/$n"
			start "$n"
		done
	fi
	for i in "${!NODES[@]}"; do
		wait_health "${NODES[$i]}" "https://127.0.0.1:${node_ports[$i]}/health"
	done
	for n in "${APIS[@]}"; do start "$n"; done
	# An api instance is ready when it sees every node live.
	for i in "${!APIS[@]}"; do
		wait_health "${APIS[$i]}" "http://127.0.0.1:${api_ports[$i]}/health" "\"live\": *${#NODES[@]}[,}]"
	done
	start haproxy
	wait_health haproxy "$hp_url/health"
	log "cluster up: ${#NODES[@]} nodes, ${#APIS[@]} api instances behind haproxy at $hp_url"
	echo
	cat "$STATE/env"
	echo
	echo "Use it:    source $STATE/env   (then the E2B SDKs, or: $BIN node ls)"
	echo "Stop it:   $0 down --state $STATE [--purge]"
}

# ------------------------------------------------------------------ down

stop_pid() { # stop_pid NAME: SIGTERM, then SIGKILL after 30 s
	local name=$1 pid
	pid=$(pid_of "$name") || return 0
	log "stopping $name (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
}

wait_gone() { # wait_gone NAME...: waits for the processes, SIGKILL after 30 s
	local name pid t
	for name in "$@"; do
		pid=$(pid_of "$name") || continue
		for t in $(seq 1 60); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "$name (pid $pid) did not stop in 30 s: SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			sleep 0.5
		fi
		: "$t"
		rm -f "$STATE/pids/$name.pid"
	done
}

down() {
	[ "$(id -u)" -eq 0 ] || die "must run as root"
	[ -d "$STATE" ] || { log "no cluster state in $STATE"; return 0; }
	local n p i v
	# The node prefixes this cluster was started with.
	if [ -s "$STATE/env" ]; then
		for i in "${!NODES[@]}"; do
			v=$(sed -n "s/^export AIRLOCK_CLUSTER_PREFIX_$(tr '[:lower:]' '[:upper:]' <<<"${NODES[$i]}")=//p" "$STATE/env" | tail -n 1)
			if [ -n "$v" ]; then PREFIXES[i]=$v; fi
		done
	fi
	# The entry first, then the api tier, then the nodes (which kill their
	# sandboxes on the way out: --kill-on-exit).
	stop_pid haproxy
	wait_gone haproxy
	for n in "${APIS[@]}"; do stop_pid "$n"; done
	wait_gone "${APIS[@]}"
	for n in "${NODES[@]}"; do stop_pid "$n"; done
	wait_gone "${NODES[@]}"
	# Sandboxes of a node that was SIGKILLed and never restarted outlive it:
	# stop their runsc processes, network namespaces and mounts.
	for n in "${NODES[@]}"; do
		cleanup_node "$n"
	done
	for p in "${PREFIXES[@]}"; do
		nft delete table inet "$p" 2>/dev/null || true
	done
	local pgdir
	pgdir=$(pg_dir)
	if [ -f "$pgdir/data/postmaster.pid" ]; then
		log "stopping PostgreSQL"
		as_postgres "$PG_BIN/pg_ctl" -D "$pgdir/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
			as_postgres "$PG_BIN/pg_ctl" -D "$pgdir/data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
	fi
	rm -f "$STATE/pids/postgres.pid"
	if [ "$PURGE" = 1 ]; then
		if grep -qF " $STATE/" /proc/self/mounts; then
			die "not purging $STATE: mounts remain under it: $(grep -F " $STATE/" /proc/self/mounts | cut -d' ' -f2 | head -n 5 | tr '\n' ' ')"
		fi
		log "removing $STATE"
		[ "$pgdir" = "$STATE/pg" ] || rm -rf "$pgdir"
		rm -rf "$STATE"
	fi
	log "cluster down"
}

# cleanup_node NODE: what a dead node's sandboxes leave: runsc sandboxes
# under its data dir, network namespaces named <prefix>-*, mounts.
cleanup_node() {
	local n=$1 i prefix dir runsc ids id ns m
	for i in "${!NODES[@]}"; do [ "${NODES[$i]}" = "$n" ] && prefix=${PREFIXES[$i]}; done
	dir="$STATE/nodes/$n"
	[ -d "$dir" ] || return 0
	runsc="${AIRLOCK_RUNSC_CACHE:-/var/cache/airlock/runsc}/$(tr -d ' \n' <"$ROOT/internal/runtime/gvisor/runsc.version" 2>/dev/null)/runsc"
	[ -x "$runsc" ] || runsc=""
	if [ -d "$dir/runsc" ] && [ -n "$runsc" ]; then
		ids=$("$runsc" --root "$dir/runsc" list -quiet 2>/dev/null || true)
		for id in $ids; do
			log "$n: removing leftover sandbox $id"
			"$runsc" --root "$dir/runsc" kill "$id" KILL >/dev/null 2>&1 || true
			"$runsc" --root "$dir/runsc" delete -force "$id" >/dev/null 2>&1 || true
		done
	fi
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$prefix-" || true); do
		ip netns delete "$ns" 2>/dev/null || true
	done
	# Deepest first.
	while read -r m; do
		umount -l "$m" 2>/dev/null || true
	done < <(awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r)
}

case "$cmd" in
up) up ;;
down) down ;;
env)
	[ -s "$STATE/env" ] || die "no cluster in $STATE (run: $0 up --state $STATE)"
	cat "$STATE/env"
	;;
-h | --help | help) usage 0 ;;
*) die "unknown command $cmd: want up, down or env (see --help)" ;;
esac
