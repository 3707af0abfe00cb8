#!/usr/bin/env bash
# The one command to set up and run every Airlock test (CI runs it via .ci/run):
#   setup → gofmt → go vet → staticcheck → cross-build → go test (unit + root) → Helm chart
#   check → build →
#   start `airlock serve` → Go raw-HTTP e2e tests → E2B JS SDK e2e tests →
#   E2B Python SDK e2e tests → console → image (build + run under runc) →
#   microVM e2e → cluster e2e.
# Needs root (gVisor, network namespaces, nftables).
#
# Environment knobs:
#   AIRLOCK_TEST_DATA_DIR   daemon data dir, kept between runs so the base template
#                           is cached (default /var/lib/airlock-test)
#   AIRLOCK_TEST_SKIP_UNIT=1  skip lint + unit tests + fuzzing (iterate on e2e only)
#   AIRLOCK_FUZZ_TIME       fuzz time per target in the fuzz stage (default 5s)
#   AIRLOCK_TEST_SKIP_E2E=1   stop after the unit tests
#   AIRLOCK_TEST_SKIP_SDK_EXAMPLES=1  skip building the Go SDK's example modules
#                           (sdk/go/examples/*; part of the unit stages)
#   AIRLOCK_TEST_GO_RUN     -run filter for the Go e2e tests
#   AIRLOCK_TEST_NODE_FILES space-separated subset of test/e2e/*.test.mjs
#   AIRLOCK_TEST_SKIP_JS=1  skip the JS SDK stage (test/e2e; e.g. to run only the Python stage)
#   AIRLOCK_TEST_BIN        airlock binary to serve with (default bin/airlock)
#   AIRLOCK_TEST_SKIP_PYTHON=1  skip the Python SDK stage (test/python with E2B's Python
#                           SDKs, after the JS stage, same daemon); AIRLOCK_TEST_PYTHON_ARGS
#                           are extra pytest arguments (a subset: "test_watch.py")
#   AIRLOCK_TEST_SKIP_CONSOLE=1  skip the web console's browser tests (test/console)
#   AIRLOCK_TEST_ARTIFACTS  where the browser tests save screenshots (default $WORK/console)
#   AIRLOCK_TEST_CONSOLE_FILES  space-separated subset of test/console's single-host files
#                           (default console.test.mjs review.test.mjs volumes.test.mjs activity.test.mjs
#                           approvals.test.mjs)
#   AIRLOCK_TEST_REPORT=1   after the daemon is up, run only bench/report/run.sh (attacks,
#                           faults, fuzz, soak; SOAK_PROFILE=long for 20 clients), which
#                           rewrites docs/RELIABILITY.md, instead of the e2e stages
#   AIRLOCK_TEST_SKIP_IMAGE=1  skip the image stage (scripts/test-image.sh: builds the OCI
#                           image with scripts/build-image.sh, runs --role api and a privileged
#                           --role node from it with runc against a throwaway PostgreSQL; net
#                           prefix i<prefix>, the /24 at .251 of AIRLOCK_TEST_SUBNET)
#   AIRLOCK_TEST_SKIP_MICROVM=1  skip the microVM stage (scripts/test-microvm.sh, a second
#                           daemon with --runtime microvm; its own knobs are listed there)
#   AIRLOCK_TEST_SKIP_CLUSTER=1  skip the cluster stage (scripts/run-cluster.sh: PostgreSQL,
#                           3 --role node daemons with net prefixes acl1-acl3 and subnets in
#                           10.84.0.0/16, 2 --role api instances behind haproxy; test/cluster
#                           with the official SDKs, and test/console/cluster.test.mjs unless
#                           AIRLOCK_TEST_SKIP_CONSOLE=1); AIRLOCK_TEST_CLUSTER_FILES runs a subset
#                           of test/cluster/*.test.mjs
#   AIRLOCK_TEST_NET_PREFIX / AIRLOCK_TEST_SUBNET  the test daemon's --net-prefix and --subnet
#                           (default ale2e, 10.79.0.0/16); AIRLOCK_E2E_EXT_NET the first three
#                           octets of the egress test's stand-in /30 (default 10.78.255) — change
#                           all three to run two suites on one host at the same time (the
#                           daemon resolves domain rules through <AIRLOCK_E2E_EXT_NET>.12 and
#                           opens <AIRLOCK_E2E_EXT_NET>.0/27 with --deny-out-except)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$(pwd)

# `sudo scripts/test.sh` runs with sudo's secure_path, which lacks Go's usual
# install dirs; find go as setup.sh does.
if ! command -v go >/dev/null 2>&1; then
	for d in /usr/local/go/bin /usr/lib/go/bin "$HOME/go/bin"; do
		[ -x "$d/go" ] && PATH="$d:$PATH"
	done
	export PATH
fi

STATICCHECK_VERSION=v0.8.2 # staticcheck 2026.2.2, supports Go 1.26
DATA_DIR=${AIRLOCK_TEST_DATA_DIR:-/var/lib/airlock-test}
HEALTH_WAIT_SECS=${AIRLOCK_TEST_HEALTH_WAIT:-1200}
export GOFLAGS="${GOFLAGS:--mod=mod}"

WORK=$(mktemp -d /tmp/airlock-test.XXXXXX)
DAEMON_LOG=$WORK/daemon.log
PID_FILE=$WORK/daemon.pid
GO_E2E_OUT=$WORK/go-e2e.out
NODE_OUT=$WORK/node.out
CLUSTER_STATE=""
MICROVM_RAN=0
FAILED=()
PASSED=()

# Each stage's wall time, printed in the summary (STAGE_TIMES: "secs|name").
STAGE_NAME=""
STAGE_START=0
SUITE_START=$(date +%s)
STAGE_TIMES=()
end_stage() {
	[ -n "$STAGE_NAME" ] && STAGE_TIMES+=("$(($(date +%s) - STAGE_START))|$STAGE_NAME")
	STAGE_NAME=""
}
stage() {
	end_stage
	STAGE_NAME=$*
	STAGE_START=$(date +%s)
	printf '\n==== %s ====\n' "$*"
}
heading() { printf '\n==== %s ====\n' "$*"; } # a heading inside a stage
print_stage_times() {
	local t
	echo "stage times (wall, s; total $(($(date +%s) - SUITE_START))s):"
	for t in "${STAGE_TIMES[@]}"; do
		printf '%6d  %s\n' "${t%%|*}" "${t#*|}" | cut -c1-100
	done
}
record() { # record NAME EXIT_CODE
	if [ "$2" -eq 0 ]; then PASSED+=("$1"); else FAILED+=("$1"); fi
}

daemon_pid() { [ -s "$PID_FILE" ] && tr -d ' \n' <"$PID_FILE"; }

stop_daemon() {
	local pid
	pid=$(daemon_pid) || return 0
	[ -n "$pid" ] || return 0
	if kill -0 "$pid" 2>/dev/null; then
		echo "stopping daemon (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 60); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "daemon did not stop in 30 s; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	: >"$PID_FILE"
}

finish() {
	local rc=$?
	end_stage
	stop_daemon
	# The cluster stage's daemons and database (it takes them down itself
	# unless interrupted).
	if [ -n "$CLUSTER_STATE" ] && [ -d "$CLUSTER_STATE" ]; then
		bash scripts/run-cluster.sh down --state "$CLUSTER_STATE" --purge >/dev/null 2>&1
	fi
	# The cluster's S3 server, by its pid file (a test may have restarted it).
	[ -n "${CLUSTER_S3_DIR:-}" ] && [ -s "$CLUSTER_S3_DIR/s3.pid" ] && kill "$(tr -d ' \n' <"$CLUSTER_S3_DIR/s3.pid")" 2>/dev/null
	# A stopped daemon keeps its nftables table (sandboxes it restores at the
	# next start need it); the suite's daemons are gone for good, so are theirs:
	# the main one's, the disk-full and warm-pool tests' second daemons'
	# (prefixes x<prefix> and w<prefix>) and the microVM stage's.
	# The microVM stage's only if it ran: another suite on this host (its
	# own prefixes) may be running that stage now.
	local p prefixes=("${AIRLOCK_TEST_NET_PREFIX:-ale2e}" "x${AIRLOCK_TEST_NET_PREFIX:-ale2e}" "w${AIRLOCK_TEST_NET_PREFIX:-ale2e}")
	[ "$MICROVM_RAN" = 1 ] && prefixes+=("${AIRLOCK_TEST_VM_NET_PREFIX:-alvm}")
	for p in "${prefixes[@]}"; do
		nft delete table inet "$p" 2>/dev/null
	done
	if [ "${#FAILED[@]}" -gt 0 ] || [ "$rc" -ne 0 ]; then
		if [ -s "$DAEMON_LOG" ]; then
			heading "daemon log (last 80 lines of $DAEMON_LOG)"
			tail -n 80 "$DAEMON_LOG"
		fi
	fi
	heading "summary"
	print_stage_times
	[ "${#PASSED[@]}" -gt 0 ] && printf 'passed: %s\n' "${PASSED[*]}"
	[ "${#FAILED[@]}" -gt 0 ] && printf 'FAILED: %s\n' "${FAILED[*]}"
	echo "logs: $WORK"
	# End with the runners' own summary lines.
	if [ -s "$GO_E2E_OUT" ]; then
		echo "-- go e2e --"
		grep -E '^(ok|FAIL|---)[[:space:]]' "$GO_E2E_OUT" | grep -vE '^--- PASS' | tail -n 20
	fi
	if [ -s "$NODE_OUT" ]; then
		echo "-- node e2e --"
		grep -E '^ℹ (tests|suites|pass|fail|cancelled|skipped|todo|duration_ms)' "$NODE_OUT" | tail -n 8
	fi
	if [ -s "$WORK/python.out" ]; then
		echo "-- python e2e --"
		grep -E '^(FAILED|ERROR) |^=+ .*(passed|failed|error).* =+$' "$WORK/python.out" | tail -n 20
	fi
	failure_digest
	if [ "${#FAILED[@]}" -gt 0 ] && [ "$rc" -eq 0 ]; then rc=1; fi
	exit "$rc"
}

# failure_digest prints, last (CI shows the tail of the output), each failed
# test with the first lines of its error: node's "failing tests" section and
# Go's "--- FAIL" lines with the messages logged before them.
failure_digest() {
	local f out
	for f in "$NODE_OUT" "$WORK/console.out" "$WORK/microvm.out" "$WORK/cluster.out" "$WORK/cluster-console.out"; do
		[ -s "$f" ] && grep -q '^✖ failing tests:' "$f" || continue
		echo "-- failures in $(basename "$f") --"
		sed -n '/^✖ failing tests:/,$p' "$f" | grep -vE '^[[:space:]]+at |^[[:space:]]*$|^ℹ |node:internal|^[[:space:]]*[{}]$|^test at |^[[:space:]]+(generatedMessage|code|operator):' |
			cut -c1-220 | head -n 40
	done
	for out in "$GO_E2E_OUT" "$WORK/go-test.out"; do
		[ -s "$out" ] && grep -qE '^[[:space:]]*--- FAIL' "$out" || continue
		echo "-- failures in $(basename "$out") --"
		grep -E '^[[:space:]]*--- FAIL|_test\.go:[0-9]+:' "$out" | cut -c1-220 | head -n 30
	done
}
trap finish EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- setup
stage "readme scripts executable"
# Every script the README tells a user to run must be executable in git
# (mode 100755): `sudo scripts/test.sh` on a fresh clone says "Permission
# denied" otherwise, which `bash scripts/…` would hide.
readme_scripts_ok=0
for s in $(grep -oE '(^|[^[:alnum:]_./-])scripts/[[:alnum:]_.-]+\.sh' README.md | grep -oE 'scripts/.*' | sort -u); do
	mode=$(git ls-files -s -- "$s" | cut -d' ' -f1)
	if [ "$mode" != 100755 ]; then
		echo "README names $s, but git has it as mode ${mode:-(not tracked)}, not 100755 (git update-index --chmod=+x $s)"
		readme_scripts_ok=1
	fi
done
[ "$readme_scripts_ok" = 0 ] && echo "ok: every scripts/*.sh the README names is mode 100755 in git"
record readme-scripts "$readme_scripts_ok"

stage "setup"
# The microVM root tests and the microVM stage need the guest kernel, on
# every host (setup.sh alone builds it only where microVMs are the default).
# Cold work of a fresh machine runs beside setup.sh rather than after it: the
# S3-compatible server the artifact tests run against (a Go build, cached per
# version like runsc) from the start, the Python SDK's dependencies (downloads,
# scripts/python-deps.sh; the Python stage waits for them) once setup's apt run
# (which also installs the later stages' Debian packages) is over.
bash scripts/build-s3-server.sh >"$WORK/s3-server-build.log" 2>&1 &
s3_build_pid=$!
# A narrowed run that needs neither (AIRLOCK_TEST_SKIP_MICROVM=1 and
# AIRLOCK_TEST_SKIP_UNIT=1) leaves it to setup.sh's own default.
build_kernel=1
[ "${AIRLOCK_TEST_SKIP_MICROVM:-0}" = 1 ] && [ "${AIRLOCK_TEST_SKIP_UNIT:-0}" = 1 ] && build_kernel=auto
AIRLOCK_BUILD_KERNEL=$build_kernel AIRLOCK_SETUP_TESTS=1 bash scripts/setup.sh || { FAILED+=(setup); exit 1; }
PY_DEPS_PID=""
if [ "${AIRLOCK_TEST_SKIP_PYTHON:-0}" != 1 ] && [ "${AIRLOCK_TEST_SKIP_E2E:-0}" != 1 ]; then
	bash scripts/python-deps.sh >"$WORK/python-deps.out" 2>"$WORK/python-deps.err" &
	PY_DEPS_PID=$!
fi
wait "$s3_build_pid" || { cat "$WORK/s3-server-build.log"; FAILED+=(setup); exit 1; }
# Only the tests need PostgreSQL (Debian's postgresql, 15): the store tests
# start throwaway servers of their own (internal/store/postgres/pgtest), so
# the package must not create and start its default cluster.
if ! dpkg-query -W -f='${Status}' postgresql 2>/dev/null | grep -q 'install ok installed'; then
	mkdir -p /etc/postgresql-common/createcluster.d
	echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/airlock-tests.conf
	{ DEBIAN_FRONTEND=noninteractive apt-get update -q &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql; } || { FAILED+=(setup); exit 1; }
fi
# The cluster stage's load balancer (scripts/run-cluster.sh).
if ! dpkg-query -W -f='${Status}' haproxy 2>/dev/null | grep -q 'install ok installed'; then
	{ DEBIAN_FRONTEND=noninteractive apt-get update -q &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends haproxy; } || { FAILED+=(setup); exit 1; }
fi

if [ "${AIRLOCK_TEST_SKIP_UNIT:-0}" != 1 ]; then
	# ------------------------------------------------------------ lint
	stage "gofmt"
	mapfile -t gofiles < <(find . -name '*.go' -not -path './.git/*' -not -path '*/node_modules/*')
	unformatted=$(gofmt -l "${gofiles[@]}")
	if [ -n "$unformatted" ]; then
		echo "not gofmt-formatted:"
		echo "$unformatted"
		record gofmt 1
	else
		echo "ok"
		record gofmt 0
	fi

	stage "go vet"
	go vet ./... && go vet -tags e2e ./test/gohttp/...
	record vet $?

	stage "staticcheck $STATICCHECK_VERSION"
	go run "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION" -tags e2e ./...
	record staticcheck $?

	# The CLI is also a client for laptops: `airlock` (without `serve`) must
	# build for macOS and Windows, and the Go SDK anywhere.
	stage "cross-build (the CLI for darwin/arm64 and windows/amd64, the Go SDK for darwin)"
	rc=0
	for t in darwin/arm64 windows/amd64; do
		GOOS=${t%/*} GOARCH=${t#*/} go build -o /dev/null ./cmd/airlock || rc=1
	done
	GOOS=darwin GOARCH=arm64 go vet ./sdk/go/... || rc=1
	record cross-build $rc

	# ------------------------------------------------------------ unit + root tests
	stage "go test ./... (unit and root tests)"
	go test -count=1 -p 1 -timeout 25m ./... 2>&1 | tee "$WORK/go-test.out"
	record go-test "${PIPESTATUS[0]}"

	# ------------------------------------------------------------ Helm chart (its own Go module)
	stage "helm chart (deploy/helm/chartcheck: render, decode strictly into k8s.io/api)"
	(cd deploy/helm/chartcheck && go vet ./... &&
		go run "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION" ./... &&
		go test -count=1 ./...)
	record helm-chart $?

	# ------------------------------------------------------------ Go SDK examples (their own modules)
	# Each reaches the SDK through a replace directive, so only its public
	# packages; test/gohttp's TestSDKExampleQuickstart runs quickstart against
	# the daemon.
	if [ "${AIRLOCK_TEST_SKIP_SDK_EXAMPLES:-0}" != 1 ]; then
		stage "go sdk examples (sdk/go/examples/*: build and vet as modules outside the SDK's)"
		rc=0
		for d in sdk/go/examples/*/; do (cd "$d" && go build -o "$WORK/sdk-examples/" ./... && go vet ./...) || rc=1; done
		record sdk-examples $rc
	fi

	# ------------------------------------------------------------ fuzz (short)
	stage "go test -fuzz (each target ${AIRLOCK_FUZZ_TIME:-5s})"
	AIRLOCK_FUZZ_LOG=$WORK/fuzz.log bash scripts/fuzz.sh
	record fuzz $?
fi

[ "${AIRLOCK_TEST_SKIP_E2E:-0}" = 1 ] && exit 0

# ---------------------------------------------------------------- daemon
stage "start airlock serve"
for b in bin/airlock bin/airlock-envd; do
	[ -x "$b" ] || { echo "$b missing (setup failed?)"; FAILED+=(build); exit 1; }
done
mkdir -p "$DATA_DIR"
PORT=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
API_KEY="e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"
LISTEN="127.0.0.1:$PORT"
# --deny-out-except <ext>.0/27: the e2e tests' stand-in internet is a private
# range, which the default --deny-out closes; the test daemon opens exactly the
# part the tests serve it from (egress.test.mjs proves <ext>.66 stays closed).
# --warm-pool code-interpreter-v1=0: the reliability suite's leak checks count
# every runtime sandbox, and a pool refilling in the background would be one;
# the default (automatic) pool has its own test (test/gohttp/warmpool_test.go).
# --registry-allow 127.0.0.1: the template tests' registries run on loopback,
# which FROM may not reach otherwise (review_build_test.go proves [::1] stays
# closed); --image-dir: where they write FROM oci-layout:// images.
# --volume-bucket-allow-private: volumes-bucket.test.mjs's S3 server (versitygw)
# is on loopback, which bucket endpoints may not name otherwise.
# --egress-proxy-allow-private: egress_proxy_test.go's SOCKS5 server is in the
# stand-in internet, a private range, which egressProxy may not name otherwise.
IMAGE_DIR=$WORK/images
mkdir -p "$IMAGE_DIR"
SERVE_CMD="${AIRLOCK_TEST_BIN:-$ROOT/bin/airlock} serve --listen $LISTEN --data-dir $DATA_DIR --api-key $API_KEY --net-prefix ${AIRLOCK_TEST_NET_PREFIX:-ale2e} --subnet ${AIRLOCK_TEST_SUBNET:-10.79.0.0/16} --dns-upstream ${AIRLOCK_E2E_EXT_NET:-10.78.255}.12 --deny-out-except ${AIRLOCK_E2E_EXT_NET:-10.78.255}.0/27 --warm-pool code-interpreter-v1=0 --registry-allow 127.0.0.1 --image-dir $IMAGE_DIR --volume-bucket-allow-private --egress-proxy-allow-private"
# The egress proxy's stand-in upstream CA (issue 29): a throwaway CA and a
# leaf for the proof test's names (secrets-a.test, secrets-b.test), which the
# daemon's proxy trusts besides the system roots; test/gohttp's
# TestSecretsProxy serves them from the stand-in internet.
UPSTREAM_CA_DIR=$WORK/upstream-ca
mkdir -p "$UPSTREAM_CA_DIR"
(cd "$UPSTREAM_CA_DIR" &&
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=airlock-e2e-upstream-ca 2>/dev/null &&
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout leaf.key -out leaf.csr -subj /CN=secrets-a.test 2>/dev/null &&
	printf 'subjectAltName=DNS:secrets-a.test,DNS:secrets-b.test\n' >leaf.ext &&
	openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile leaf.ext -out leaf.pem 2>/dev/null) ||
	{ echo "generating the upstream test CA failed"; FAILED+=(setup); exit 1; }
SERVE_CMD+=" --egress-proxy-upstream-ca $UPSTREAM_CA_DIR/ca.pem"
export AIRLOCK_E2E_UPSTREAM_CA_DIR=$UPSTREAM_CA_DIR
export AIRLOCK_E2E_NETNS_PREFIX=${AIRLOCK_TEST_NET_PREFIX:-ale2e}-
# Stand-in credentials in the daemon's environment (this set-up reads none of
# them: no --artifacts, --api-key given): test/gohttp's TestReviewSandbox
# (attack/M5) checks that no helper process (runsc, its gofer) inherits them.
# Daemons the Go e2e tests restart get them too (restartDaemonArgs).
export AIRLOCK_E2E_CANARY_ENV="AWS_ACCESS_KEY_ID=airlock-canary-aws-id AWS_SECRET_ACCESS_KEY=airlock-canary-aws-secret AIRLOCK_CLUSTER_SECRET=airlock-canary-cluster-secret AIRLOCK_API_KEY=airlock-canary-api-key PGPASSWORD=airlock-canary-db-password"
echo "data dir $DATA_DIR, listen $LISTEN, log $DAEMON_LOG"
# shellcheck disable=SC2086 # SERVE_CMD is split on purpose (no spaces in its parts)
env $AIRLOCK_E2E_CANARY_ENV $SERVE_CMD </dev/null >>"$DAEMON_LOG" 2>&1 &
echo $! >"$PID_FILE"

echo "waiting for /health (up to ${HEALTH_WAIT_SECS}s; the first start builds the base template)"
off=0
start=$(date +%s)
healthy=0
while :; do
	if [ -s "$DAEMON_LOG" ]; then
		size=$(stat -c %s "$DAEMON_LOG")
		if [ "$size" -gt "$off" ]; then
			tail -c +$((off + 1)) "$DAEMON_LOG" | head -c $((size - off)) | sed 's/^/[daemon] /'
			off=$size
		fi
	fi
	# Ready with every default template: the daemon answers 200 once the
	# first is built and lists the others under "building" (the suites
	# expect them all; their creates would wait, but on the clients' timeouts).
	if body=$(curl -fsS -m 2 "http://$LISTEN/health" 2>/dev/null) && ! grep -q '"building"' <<<"$body"; then
		healthy=1
		break
	fi
	if ! kill -0 "$(daemon_pid)" 2>/dev/null; then
		echo "daemon exited before becoming healthy"
		break
	fi
	if [ $(($(date +%s) - start)) -ge "$HEALTH_WAIT_SECS" ]; then
		echo "daemon not healthy after ${HEALTH_WAIT_SECS}s"
		break
	fi
	sleep 2
done
if [ "$healthy" != 1 ]; then
	FAILED+=(daemon-start)
	exit 1
fi
echo "daemon healthy after $(($(date +%s) - start))s"

# The daemon prints `export E2B_API_URL=… E2B_SANDBOX_URL=… E2B_API_KEY=…`.
exported() { grep -oE "(^|[[:space:]])$1=[^[:space:]]+" "$DAEMON_LOG" | tail -n 1 | sed -E "s/^[[:space:]]*$1=//; s/^[\"']//; s/[\"']$//"; }
E2B_API_URL=$(exported E2B_API_URL)
E2B_SANDBOX_URL=$(exported E2B_SANDBOX_URL)
: "${E2B_API_URL:=http://$LISTEN}"
: "${E2B_SANDBOX_URL:=$E2B_API_URL}"
export E2B_API_URL E2B_SANDBOX_URL
export E2B_API_KEY=$API_KEY
echo "E2B_API_URL=$E2B_API_URL E2B_SANDBOX_URL=$E2B_SANDBOX_URL"

export AIRLOCK_E2E_URL=$E2B_API_URL
export AIRLOCK_E2E_SANDBOX_URL=$E2B_SANDBOX_URL
export AIRLOCK_E2E_API_KEY=$API_KEY
export AIRLOCK_E2E_PID_FILE=$PID_FILE
export AIRLOCK_E2E_SERVE_CMD=$SERVE_CMD
export AIRLOCK_E2E_DATA_DIR=$DATA_DIR
export AIRLOCK_E2E_SUBNET=${AIRLOCK_TEST_SUBNET:-10.79.0.0/16}
export AIRLOCK_E2E_DAEMON_LOG=$DAEMON_LOG
export AIRLOCK_E2E_IMAGE_DIR=$IMAGE_DIR

# ---------------------------------------------------------------- reliability report (on request)
if [ "${AIRLOCK_TEST_REPORT:-0}" = 1 ]; then
	stage "reliability report (bench/report/run.sh → docs/RELIABILITY.md)"
	bash bench/report/run.sh 2>&1 | tee "$WORK/report.out"
	record report "${PIPESTATUS[0]}"
	exit 0
fi

# ---------------------------------------------------------------- Go raw-HTTP e2e
stage "go e2e (test/gohttp, raw HTTP as the Python SDK)"
go test -tags e2e -count=1 -v -timeout 30m ${AIRLOCK_TEST_GO_RUN:+-run "$AIRLOCK_TEST_GO_RUN"} ./test/gohttp/... 2>&1 | tee "$GO_E2E_OUT"
record go-e2e "${PIPESTATUS[0]}"

# The restart test replaces the daemon; make sure one is healthy before the JS suite.
if ! curl -fsS -m 5 -o /dev/null "http://$LISTEN/health"; then
	echo "daemon not healthy after the Go e2e tests"
	FAILED+=(daemon-after-go-e2e)
	exit 1
fi

# ---------------------------------------------------------------- JS SDK e2e
if [ "${AIRLOCK_TEST_SKIP_JS:-0}" != 1 ]; then
	stage "js e2e (test/e2e, official e2b SDK)"
	(cd test/e2e && npm ci --no-audit --no-fund --loglevel=error)
	record npm-ci $?
	node_flags=(--test --test-reporter=spec)
	if node --test-concurrency=2 -e 0 >/dev/null 2>&1; then node_flags+=(--test-concurrency=2); fi
	if node --test-timeout=1000 -e 0 >/dev/null 2>&1; then node_flags+=(--test-timeout=900000); fi
	read -r -a node_files <<<"${AIRLOCK_TEST_NODE_FILES:-sandbox.test.mjs commands.test.mjs files.test.mjs isolation.test.mjs egress.test.mjs security.test.mjs metrics.test.mjs limits.test.mjs ports.test.mjs interpreter.test.mjs interpreter-r-java.test.mjs interpreter-stdout.test.mjs interpreter-warmup.test.mjs templates.test.mjs templates-sdk.test.mjs templates-cli.test.mjs templates-review.test.mjs snapshots.test.mjs fspause.test.mjs volumes.test.mjs volumes-bucket.test.mjs events.test.mjs}"
	(cd test/e2e && node "${node_flags[@]}" "${node_files[@]}") 2>&1 | tee "$NODE_OUT"
	record js-e2e "${PIPESTATUS[0]}"
fi

# ---------------------------------------------------------------- Python SDK e2e
# E2B's Python SDKs (../shared/vendor/python, dependencies from Debian:
# scripts/python-deps.sh) against the same daemon.
if [ "${AIRLOCK_TEST_SKIP_PYTHON:-0}" != 1 ]; then
	stage "python e2e (test/python, official e2b and e2b_code_interpreter Python SDKs)"
	# Started in the setup stage; run here if that one failed or was not started.
	if [ -n "$PY_DEPS_PID" ] && wait "$PY_DEPS_PID"; then
		cat "$WORK/python-deps.err"
		PY_SITE=$(tail -n 1 "$WORK/python-deps.out")
	else
		PY_SITE=$(bash scripts/python-deps.sh | tail -n 1) || PY_SITE=""
	fi
	if [ -n "$PY_SITE" ] && [ -d "$PY_SITE" ]; then
		# ${AIRLOCK_TEST_PYTHON_ARGS} selects tests (e.g. "test_watch.py -k new_file").
		# shellcheck disable=SC2086
		(cd test/python && PYTHONPATH=$PY_SITE PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m pytest -p no:cacheprovider ${AIRLOCK_TEST_PYTHON_ARGS:-}) 2>&1 | tee "$WORK/python.out"
		record python-e2e "${PIPESTATUS[0]}"
	else
		record python-deps 1
	fi
fi

# ---------------------------------------------------------------- web console (headless chromium)
if [ "${AIRLOCK_TEST_SKIP_CONSOLE:-0}" != 1 ]; then
	stage "console (test/console, headless chromium via playwright-core)"
	export AIRLOCK_TEST_ARTIFACTS=${AIRLOCK_TEST_ARTIFACTS:-$WORK/console}
	# Only the tests need a browser: Debian's chromium, installed here rather than by setup.sh.
	if ! dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q 'install ok installed'; then
		DEBIAN_FRONTEND=noninteractive apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium
	fi
	(cd test/console && npm ci --no-audit --no-fund --loglevel=error)
	record console-npm-ci $?
	(cd test/console && node --test --test-concurrency=1 --test-reporter=spec ${AIRLOCK_TEST_CONSOLE_FILES:-console.test.mjs review.test.mjs volumes.test.mjs activity.test.mjs approvals.test.mjs}) 2>&1 | tee "$WORK/console.out"
	record console "${PIPESTATUS[0]}"
	echo "console screenshots: $AIRLOCK_TEST_ARTIFACTS"
fi

# ---------------------------------------------------------------- OCI image
if [ "${AIRLOCK_TEST_SKIP_IMAGE:-0}" != 1 ]; then
	stage "image (scripts/build-image.sh; --role api and a privileged --role node from it under runc)"
	IFS=./ read -r o1 o2 _ <<<"${AIRLOCK_TEST_SUBNET:-10.79.0.0/16}"
	AIRLOCK_TEST_WORK=$WORK AIRLOCK_IMAGE_NET_PREFIX="i${AIRLOCK_TEST_NET_PREFIX:-ale2e}" AIRLOCK_IMAGE_SUBNET="$o1.$o2.251.0/24" \
		bash scripts/test-image.sh --data-dir "$DATA_DIR" 2>&1 | tee "$WORK/image.out"
	record image "${PIPESTATUS[0]}"
fi

# ---------------------------------------------------------------- microVM e2e
if [ "${AIRLOCK_TEST_SKIP_MICROVM:-0}" != 1 ]; then
	stage "microvm e2e (second daemon, --runtime microvm)"
	MICROVM_RAN=1
	AIRLOCK_TEST_DATA_DIR=$DATA_DIR AIRLOCK_TEST_WORK=$WORK bash scripts/test-microvm.sh 2>&1 | tee "$WORK/microvm.out"
	record microvm-e2e "${PIPESTATUS[0]}"
fi

# start_cluster_s3 DIR starts versitygw (posix backend in DIR/root) on a free
# loopback port with random credentials, makes the bucket airlock-cluster and
# exports what `airlock serve --artifacts s3://…` reads. The exact start is
# written to DIR/cmd (as run-cluster.sh does for its daemons: run it again to
# restart the server after it stopped, on the same port, with the same
# credentials and data; it refuses while the server runs), the pid to
# DIR/s3.pid. Once the cluster is up, the stage links both into its state dir
# (cmd/s3, pids/s3.pid): the tests stop and restart S3 with them
# (test/cluster/helpers.mjs stopS3/startS3).
CLUSTER_S3_DIR=""
start_cluster_s3() {
	local dir=$1 bin port key secret i
	bin=${AIRLOCK_S3_SERVER_CACHE:-/var/cache/airlock/versitygw}/$(tr -d ' \n' <internal/artifacts/s3test/versitygw.version)/versitygw
	[ -x "$bin" ] || { echo "cluster S3: $bin missing (scripts/build-s3-server.sh)"; return 1; }
	mkdir -p "$dir/root"
	chmod 0700 "$dir"
	port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
	key=$(od -An -N10 -tx1 /dev/urandom | tr -d ' \n')
	secret=$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
	{
		echo '#!/usr/bin/env bash'
		echo "# Starts the cluster stage's S3 server (versitygw) on 127.0.0.1:$port (written by scripts/test.sh)."
		echo '# Run it again to restart it after it stopped; it refuses while it runs.'
		echo 'set -euo pipefail'
		printf 'pidfile=%q\n' "$dir/s3.pid"
		cat <<'EOF'
if pid=$(tr -d ' \n' 2>/dev/null <"$pidfile") && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
	echo "the S3 server already runs (pid $pid)" >&2
	exit 1
fi
EOF
		printf 'export ROOT_ACCESS_KEY_ID=%q ROOT_SECRET_ACCESS_KEY=%q\n' "$key" "$secret"
		echo 'cd /'
		printf 'setsid %q --port %q --region us-east-1 --quiet posix %q </dev/null >>%q 2>&1 &\n' \
			"$bin" "127.0.0.1:$port" "$dir/root" "$dir/server.log"
		echo 'echo $! >"$pidfile"'
	} >"$dir/cmd"
	chmod 0700 "$dir/cmd"
	bash "$dir/cmd" || return 1
	CLUSTER_S3_DIR=$dir
	for i in $(seq 100); do
		curl -s -o /dev/null "http://127.0.0.1:$port/" && break
		sleep 0.1
	done
	# The bucket, with a SigV4-signed PUT (curl signs; versitygw wants the
	# payload hash header).
	if ! curl -fsS -o /dev/null --aws-sigv4 "aws:amz:us-east-1:s3" --user "$key:$secret" \
		-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -X PUT "http://127.0.0.1:$port/airlock-cluster"; then
		echo "cluster S3: making the bucket failed"; tail -n 20 "$dir/server.log"
		return 1
	fi
	export AIRLOCK_S3_ENDPOINT=http://127.0.0.1:$port AWS_ACCESS_KEY_ID=$key AWS_SECRET_ACCESS_KEY=$secret AWS_REGION=us-east-1
	echo "cluster S3: versitygw on 127.0.0.1:$port (pid $(cat "$dir/s3.pid")), bucket airlock-cluster"
}

# link_cluster_s3 STATE: the S3 server's cmd and pid file as the cluster
# state dir's cmd/s3 and pids/s3.pid (after run-cluster.sh up made them).
link_cluster_s3() {
	[ -n "$CLUSTER_S3_DIR" ] || return 0
	ln -sfn "$CLUSTER_S3_DIR/cmd" "$1/cmd/s3"
	ln -sfn "$CLUSTER_S3_DIR/s3.pid" "$1/pids/s3.pid"
}

# stop_cluster_s3 stops the server by its pid file (not $!: a test may have
# restarted it).
stop_cluster_s3() {
	local pid
	[ -n "$CLUSTER_S3_DIR" ] || return 0
	pid=$(tr -d ' \n' 2>/dev/null <"$CLUSTER_S3_DIR/s3.pid")
	if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null
	fi
	# Its objects (hundreds of MiB of templates); server.log stays.
	rm -rf "$CLUSTER_S3_DIR/root"
	CLUSTER_S3_DIR=""
	unset AIRLOCK_S3_ENDPOINT AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION
}

# ---------------------------------------------------------------- cluster e2e
if [ "${AIRLOCK_TEST_SKIP_CLUSTER:-0}" != 1 ]; then
	stage "cluster e2e (PostgreSQL, 3 nodes, 2 api instances behind haproxy; test/cluster)"
	cluster_start=$(date +%s)
	CLUSTER_STATE=$WORK/cluster
	# The nodes share the suite's built templates (hard links). No boot
	# snapshots (and so no warm pools): each would cost every node sandbox
	# boots at start, and the tests count sandboxes. --node-cpus 32: the
	# default states 4 CPUs per host core, 4 default sandboxes a node on this
	# 2-core machine, and once a node is killed the other two must take the
	# test's creates (CI failed on "node n3 is full").
	# A real S3 server (versitygw, built in setup) is the cluster's artifact
	# store: templates built on one node are pulled by the others.
	# 16-secrets.test.mjs's stand-in internet is <ext>.16/29 (its resolver on
	# .20): the nodes resolve ruled names there and their egress proxies trust
	# the suite's upstream CA, as the single daemon does. 17-egressproxy's
	# SOCKS5 server is in the stand-in internet too (<ext>.24/29), a private
	# range: --egress-proxy-allow-private. 18-approval.test.mjs's destinations
	# are <ext>.8/29 (its webhook on loopback: --webhook-allow-private).
	CLUSTER_EGRESS_ARGS="--dns-upstream ${AIRLOCK_E2E_EXT_NET:-10.78.255}.20 --deny-out-except ${AIRLOCK_E2E_EXT_NET:-10.78.255}.0/27 --egress-proxy-upstream-ca $UPSTREAM_CA_DIR/ca.pem --egress-proxy-allow-private"
	cluster_artifacts=()
	if start_cluster_s3 "$WORK/cluster-s3"; then
		cluster_artifacts=(--artifacts "s3://airlock-cluster/ci")
	else
		record cluster-s3 1
	fi
	if bash scripts/run-cluster.sh up --state "$CLUSTER_STATE" --seed-templates "$DATA_DIR" "${cluster_artifacts[@]}" \
		--node-args "--boot-snapshots=false --node-cpus 32 --webhook-allow-private $CLUSTER_EGRESS_ARGS" \
		--api-args "--webhook-allow-private --webhook-retry-interval 1s" 2>&1 | tee "$WORK/cluster-up.out"; then
		echo "cluster up after $(($(date +%s) - cluster_start))s"
		link_cluster_s3 "$CLUSTER_STATE"
		(cd test/cluster && npm ci --no-audit --no-fund --loglevel=error)
		record cluster-npm-ci $?
		cluster_flags=(--test --test-reporter=spec --test-concurrency=1)
		if node --test-timeout=1000 -e 0 >/dev/null 2>&1; then cluster_flags+=(--test-timeout=900000); fi
		read -r -a cluster_files <<<"${AIRLOCK_TEST_CLUSTER_FILES:-01-placement.test.mjs 02-routing.test.mjs 03-cross-api.test.mjs 04-templates.test.mjs 05-drain.test.mjs 06-faults-api.test.mjs 07-faults-node.test.mjs 08-faults-pg.test.mjs 09-move.test.mjs 10-move-faults.test.mjs 11-security.test.mjs 12-artifact-integrity.test.mjs 13-pause-upload.test.mjs 14-volumes.test.mjs 15-events.test.mjs 16-secrets.test.mjs 17-egressproxy.test.mjs 18-approval.test.mjs 19-activity-move.test.mjs}"
		(cd test/cluster && AIRLOCK_CLUSTER_STATE=$CLUSTER_STATE AIRLOCK_CLUSTER_S3_DIR=${CLUSTER_S3_DIR} node "${cluster_flags[@]}" "${cluster_files[@]}") 2>&1 | tee "$WORK/cluster.out"
		cluster_rc=${PIPESTATUS[0]}
		record cluster-e2e "$cluster_rc"
		if [ "${AIRLOCK_TEST_SKIP_CONSOLE:-0}" != 1 ]; then
			# The console's cluster views, in the browser, through the balancer
			# (test/console/cluster.test.mjs; the console stage installed chromium).
			[ -d test/console/node_modules/playwright-core ] || (cd test/console && npm ci --no-audit --no-fund --loglevel=error)
			# shellcheck source=/dev/null # written by run-cluster.sh up
			(set -a && . "$CLUSTER_STATE/env" && set +a && cd test/console &&
				AIRLOCK_E2E_URL=$E2B_API_URL AIRLOCK_E2E_API_KEY=$E2B_API_KEY node --test --test-reporter=spec cluster.test.mjs) 2>&1 | tee "$WORK/cluster-console.out"
			console_rc=${PIPESTATUS[0]}
			record cluster-console "$console_rc"
			[ "$console_rc" -eq 0 ] || cluster_rc=1
		fi
	else
		cluster_rc=1
		record cluster-up 1
	fi
	# Keep the daemons' logs: down --purge removes the state dir.
	cp -rL "$CLUSTER_STATE/logs" "$WORK/cluster-logs" 2>/dev/null
	if [ "$cluster_rc" -ne 0 ]; then
		for f in "$WORK"/cluster-logs/*.log; do
			[ -s "$f" ] || continue
			heading "cluster log $(basename "$f") (last 25 lines)"
			tail -n 25 "$f"
		done
	fi
	bash scripts/run-cluster.sh down --state "$CLUSTER_STATE" --purge 2>&1 | tail -n 20
	record cluster-down "${PIPESTATUS[0]}"
	stop_cluster_s3
	CLUSTER_STATE=""
	echo "cluster stage: $(($(date +%s) - cluster_start))s (logs: $WORK/cluster-logs)"
fi
