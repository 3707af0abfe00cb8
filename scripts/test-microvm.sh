#!/usr/bin/env bash
# The microVM stage of scripts/test.sh (also runs alone after setup.sh): a
# second daemon with --runtime microvm - emulated (TCG) on hosts without
# hardware KVM - on its own data dir, network prefix, subnet and port, runs
# test/e2e/microvm.test.mjs and test/e2e/microvm-templates-sdk.test.mjs (a
# template built with the SDK's Template.build) with the official e2b SDK and
# test/e2e/microvm-interpreter.test.mjs with @e2b/code-interpreter, and
# test/e2e/microvm-review-m6.test.mjs (security review M6: no host mount of a
# build step's disk), test/e2e/interpreter-r-java.test.mjs (R and Java
# contexts, issue 26), test/e2e/events.test.mjs (lifecycle events, issue
# 28), test/e2e/microvm-volumes.test.mjs (volumes over NFS, issue 27) and
# test/e2e/microvm-volumes-bucket.test.mjs (bucket volumes over NFS; the
# daemon gets --volume-bucket-allow-private for its loopback S3 server),
# test/e2e/microvm-secrets.test.mjs (network.rules secrets through the egress
# proxy, issue 29), test/e2e/microvm-secrets-attacks.test.mjs (issue 29's
# attack list: redirect, CNAME, HTTP/2 :authority, smuggling, WebSocket,
# plain HTTP), test/e2e/microvm-egressproxy.test.mjs (network.egressProxy,
# a SOCKS5 upstream; the daemon gets --egress-proxy-allow-private),
# test/e2e/microvm-approval.test.mjs (the egress approval hook, issue 28
# part 3), test/e2e/microvm-activity.test.mjs (process entries of the
# activity feed, issue 28 part 2), then a subset of test/python. The root Go tests of
# internal/runtime/microvm run in test.sh's `go test ./...` stage.
#
# Knobs: AIRLOCK_TEST_DATA_DIR (the main suite's data dir, whose built
# templates are shared by hard links; default /var/lib/airlock-test),
# AIRLOCK_TEST_VM_DATA_DIR (default <that>-microvm), AIRLOCK_TEST_VM_NET_PREFIX
# (default alvm), AIRLOCK_TEST_VM_SUBNET (default 10.80.0.0/16),
# AIRLOCK_TEST_WORK (log dir), AIRLOCK_TEST_VM_NODE_FILES (a subset of the test
# files above), AIRLOCK_E2E_EXT_NET (first three octets of the network test's
# addresses, as in scripts/test.sh; default 10.78.255), AIRLOCK_TEST_VM_SKIP_PYTHON=1
# (skip issue 26's cases through E2B's Python SDK, test/python) and
# AIRLOCK_TEST_VM_PYTHON_ARGS (pytest arguments instead of that subset),
# AIRLOCK_TEST_VM_APPROVAL_QUEUE (the daemon's --approval-queue; default
# derived from the net prefix).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$(pwd)

SRC_DATA=${AIRLOCK_TEST_DATA_DIR:-/var/lib/airlock-test}
VM_DATA=${AIRLOCK_TEST_VM_DATA_DIR:-$SRC_DATA-microvm}
VM_PREFIX=${AIRLOCK_TEST_VM_NET_PREFIX:-alvm}
VM_SUBNET=${AIRLOCK_TEST_VM_SUBNET:-10.80.0.0/16}
WORK=${AIRLOCK_TEST_WORK:-$(mktemp -d /tmp/airlock-test-microvm.XXXXXX)}
LOG=$WORK/daemon-microvm.log

bash scripts/build-kernel.sh >/dev/null || { echo "guest kernel build failed"; exit 1; }

# Share the built templates (immutable, named by content hash).
mkdir -p "$VM_DATA/templates"
for d in "$SRC_DATA"/templates/*/; do
	[ -f "$d/meta.json" ] || continue
	n=$(basename "$d")
	[ -e "$VM_DATA/templates/$n" ] || cp -al "$d" "$VM_DATA/templates/$n"
done

# The egress proxy's stand-in upstream CA (issue 29), as scripts/test.sh
# makes it: a throwaway CA and a leaf for secrets-a.test and secrets-b.test,
# which microvm-secrets.test.mjs serves from <ext>.24/29 (its DNS server on
# <ext>.28 is the daemon's --dns-upstream, asked only for sandboxes with
# domain rules) and the daemon's egress proxy trusts.
UPSTREAM_CA_DIR=$WORK/upstream-ca
mkdir -p "$UPSTREAM_CA_DIR"
(cd "$UPSTREAM_CA_DIR" &&
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=airlock-e2e-upstream-ca 2>/dev/null &&
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout leaf.key -out leaf.csr -subj /CN=secrets-a.test 2>/dev/null &&
	printf 'subjectAltName=DNS:secrets-a.test,DNS:secrets-b.test\n' >leaf.ext &&
	openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile leaf.ext -out leaf.pem 2>/dev/null) ||
	{ echo "generating the upstream test CA failed"; exit 1; }
export AIRLOCK_E2E_UPSTREAM_CA_DIR=$UPSTREAM_CA_DIR
EXT=${AIRLOCK_E2E_EXT_NET:-10.78.255}

PORT=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
LISTEN=127.0.0.1:$PORT
API_KEY="e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"
# --deny-out-except <ext>.16/29: microvm.test.mjs serves the open half of its
# network test there (private, so closed by the default --deny-out otherwise);
# <ext>.24/29: microvm-secrets.test.mjs's stand-in internet; <ext>.32/29:
# microvm-egressproxy.test.mjs's, whose SOCKS5 server is private, which
# egressProxy may name only with --egress-proxy-allow-private; <ext>.40/29:
# microvm-approval.test.mjs's (the approval webhook and its destinations).
# code-interpreter-v1 gets its boot snapshot (default on) and a warm pool of
# one: microvm-interpreter.test.mjs covers the cold, boot-snapshot and pool
# paths of the interpreter.
"${AIRLOCK_TEST_BIN:-$ROOT/bin/airlock}" serve --runtime microvm --templates base,code-interpreter-v1 \
	--warm-pool code-interpreter-v1=1 --listen "$LISTEN" \
	--data-dir "$VM_DATA" --api-key "$API_KEY" --net-prefix "$VM_PREFIX" --subnet "$VM_SUBNET" \
	--deny-out-except "$EXT.16/29,$EXT.24/29,$EXT.32/29,$EXT.40/29" --dns-upstream "$EXT.28" \
	${AIRLOCK_TEST_VM_APPROVAL_QUEUE:+--approval-queue "$AIRLOCK_TEST_VM_APPROVAL_QUEUE"} \
	--egress-proxy-upstream-ca "$UPSTREAM_CA_DIR/ca.pem" --egress-proxy-allow-private \
	--volume-bucket-allow-private --kill-on-exit </dev/null >"$LOG" 2>&1 &
PID=$!
stop() {
	if kill -0 "$PID" 2>/dev/null; then
		kill -TERM "$PID" 2>/dev/null
		for _ in $(seq 1 60); do kill -0 "$PID" 2>/dev/null || break; sleep 0.5; done
		kill -KILL "$PID" 2>/dev/null || true
	fi
}
trap stop EXIT

echo "microVM daemon: $LISTEN, data $VM_DATA, prefix $VM_PREFIX, subnet $VM_SUBNET, log $LOG"
healthy=0
for _ in $(seq 1 300); do
	if curl -fsS -m 2 "http://$LISTEN/health" 2>/dev/null; then
		healthy=1
		echo
		break
	fi
	kill -0 "$PID" 2>/dev/null || break
	sleep 1
done
if [ "$healthy" != 1 ]; then
	echo "microVM daemon not healthy; log:"
	tail -n 40 "$LOG"
	exit 1
fi
grep -m1 'isolation runtime' "$LOG"
# A fresh data dir builds the interpreter's microVM root image and its boot
# snapshot while the first tests start: under TCG that is three emulated
# VMs on the host's cores at once, and an R kernel starting in one of them
# failed a cell (500 after 40 s) on a fresh machine. Start the tests once
# the daemon is warm, as a daemon that has been up a minute is (bounded:
# the tests then run on whatever state it reached).
for _ in $(seq 1 240); do
	grep -q 'msg="\(boot snapshot ready\|no boot snapshot[^"]*\)".*template=code-interpreter-v1' "$LOG" && break
	kill -0 "$PID" 2>/dev/null || break
	sleep 1
done
grep -m1 'boot snapshot ready.*template=code-interpreter-v1' "$LOG" || echo "microVM daemon: no boot snapshot of code-interpreter-v1 yet; testing anyway"

(cd test/e2e && [ -d node_modules/e2b ] || npm ci --no-audit --no-fund --loglevel=error)
(cd test/e2e && E2B_API_URL=http://$LISTEN E2B_SANDBOX_URL=http://$LISTEN E2B_API_KEY=$API_KEY \
	AIRLOCK_TEST_VM_DAEMON_LOG=$LOG node --test --test-concurrency=1 --test-reporter=spec \
	${AIRLOCK_TEST_VM_NODE_FILES:-microvm.test.mjs microvm-activity.test.mjs microvm-templates-sdk.test.mjs microvm-interpreter.test.mjs microvm-review-m6.test.mjs interpreter-r-java.test.mjs events.test.mjs microvm-volumes.test.mjs microvm-volumes-bucket.test.mjs microvm-secrets.test.mjs microvm-secrets-attacks.test.mjs microvm-egressproxy.test.mjs microvm-approval.test.mjs})
rc=$?
# Issue 26's cases through E2B's Python SDK (test/python), on this daemon:
# /proc and pipe reads, watch events, maskRequestHost (pause, resume, fork),
# the template endpoints' status codes, kills.
if [ "${AIRLOCK_TEST_VM_SKIP_PYTHON:-0}" != 1 ]; then
	if PY_SITE=$(bash scripts/python-deps.sh | tail -n 1) && [ -d "$PY_SITE" ]; then
		# shellcheck disable=SC2086
		(cd test/python && E2B_API_URL=http://$LISTEN E2B_SANDBOX_URL=http://$LISTEN E2B_API_KEY=$API_KEY \
			PYTHONPATH=$PY_SITE PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m pytest -p no:cacheprovider \
			${AIRLOCK_TEST_VM_PYTHON_ARGS:-test_files_read.py test_watch.py test_network.py test_templates.py::test_template_endpoints_answer_the_codes_the_client_accepts test_kill.py test_charts.py test_kernels.py}) || rc=1
	else
		rc=1
	fi
fi
if [ "$rc" -ne 0 ]; then
	echo "microVM daemon log (last 60 lines):"
	tail -n 60 "$LOG"
fi
exit "$rc"
