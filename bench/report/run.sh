#!/usr/bin/env bash
# Runs the reliability suite against a running daemon and writes
# docs/RELIABILITY.md via bench/report. Needs the environment scripts/test.sh
# exports for the Go e2e tests (AIRLOCK_E2E_URL, AIRLOCK_E2E_API_KEY,
# AIRLOCK_E2E_PID_FILE, AIRLOCK_E2E_SERVE_CMD, AIRLOCK_E2E_DATA_DIR,
# AIRLOCK_E2E_NETNS_PREFIX, …) and E2B_API_URL / E2B_API_KEY for the SDK.
# The fault tests SIGKILL and restart the daemon.
#
#   SOAK_PROFILE=ci|long (default ci), SOAK_ARGS extra bench/soak flags,
#   AIRLOCK_FUZZ_TIME fuzz time per target (default 5s),
#   AIRLOCK_REPORT_NODE_REVIEW space-separated node spec outputs of other suites
#   (scripts/test.sh's cluster.out, microvm.out …) whose tests named after a
#   security-review finding (H1, M6 …) are counted as attacks too.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
export GOFLAGS="${GOFLAGS:--mod=mod}"
W=$(mktemp -d /tmp/airlock-report.XXXXXX)
echo "outputs in $W"

go test -tags e2e -count=1 -json -timeout 30m \
	-run 'TestEscapeAttempts|TestResourceAbuse|TestAPIAbuse|TestReview|TestDaemonKilledMidOperation|TestDaemonKilledMidCheckpoint|TestDaemonKilledMidTemplateBuild|TestHostDiskFull|TestStreamWhenSandboxOOMStopped' ./test/gohttp/ >"$W/go.json"
echo "go suite exit $?"
# The security review's root tests of internal packages (real nft, real S3
# server, real build contexts).
go test -count=1 -json -timeout 20m -run 'TestReview' ./internal/... >"$W/go-internal.json"
echo "internal review tests exit $?"
review_args=()
for f in ${AIRLOCK_REPORT_NODE_REVIEW:-}; do
	review_args+=(-node-review "$f")
done
# The SDK suite needs its packages (scripts/test.sh installs them only in its
# js e2e stage, which report mode skips).
[ -d test/e2e/node_modules/e2b ] || (cd test/e2e && npm ci --no-audit --no-fund --loglevel=error)
(cd test/e2e && node --test --test-reporter=spec security.test.mjs) >"$W/node.out" 2>&1
echo "sdk security suite exit $?"
AIRLOCK_FUZZ_LOG=$W/fuzz.log bash scripts/fuzz.sh >/dev/null
echo "fuzz exit $?"
# shellcheck disable=SC2086 # SOAK_ARGS is split on purpose
go run ./bench/soak -profile "${SOAK_PROFILE:-ci}" -pid-file "${AIRLOCK_E2E_PID_FILE:-/dev/null}" -json "$W/soak.json" ${SOAK_ARGS:-}
echo "soak exit $?"
go run ./bench/report -go-json "$W/go.json" -go-json "$W/go-internal.json" -node "$W/node.out" "${review_args[@]}" -fuzz "$W/fuzz.log" -soak "$W/soak.json"
