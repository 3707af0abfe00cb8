#!/usr/bin/env bash
# Benchmarks a running Airlock daemon. Export the daemon's E2B_API_URL and
# E2B_API_KEY lines first (or AIRLOCK_URL / AIRLOCK_API_KEY); extra arguments
# go to airlock-bench (e.g. -sequential 5 -file-mib 20). Then benchmarks the
# code interpreter (bench/interpreter.mjs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export GOFLAGS="${GOFLAGS:--mod=mod}"
mkdir -p bin
go build -o bin/airlock-bench ./bench/cmd/airlock-bench
bin/airlock-bench "$@"

# Code interpreter (needs the code-interpreter-v1 template and node): the
# @e2b/code-interpreter SDK from test/e2e. Skip with AIRLOCK_BENCH_INTERPRETER=0.
if [ "${AIRLOCK_BENCH_INTERPRETER:-1}" != 0 ]; then
  if [ ! -d test/e2e/node_modules/@e2b/code-interpreter ]; then
    (cd test/e2e && npm ci --no-audit --no-fund)
  fi
  node bench/interpreter.mjs
fi

# Web console endpoints and the terminal's keystroke echo (bench/console.mjs).
# Skip with AIRLOCK_BENCH_CONSOLE=0.
if [ "${AIRLOCK_BENCH_CONSOLE:-1}" != 0 ]; then
  ws_flag=()
  node -e 'process.exit(typeof WebSocket === "undefined" ? 1 : 0)' || ws_flag=(--experimental-websocket)
  node "${ws_flag[@]}" --no-warnings bench/console.mjs
fi

# Snapshots (cold boot vs boot snapshot vs warm pool, named snapshots, PSS of
# forks vs fresh sandboxes): needs a daemon started with
# --warm-pool code-interpreter-v1=1. Run with AIRLOCK_BENCH_SNAPSHOTS=1.
if [ "${AIRLOCK_BENCH_SNAPSHOTS:-0}" = 1 ]; then
  node bench/snapshots.mjs
fi
