#!/usr/bin/env bash
# Benchmarks a running Airlock daemon. Export the daemon's E2B_API_URL and
# E2B_API_KEY lines first (or AIRLOCK_URL / AIRLOCK_API_KEY); extra arguments
# go to airlock-bench (e.g. -sequential 5 -file-mib 20).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export GOFLAGS="${GOFLAGS:--mod=mod}"
mkdir -p bin
go build -o bin/airlock-bench ./bench/cmd/airlock-bench
exec bin/airlock-bench "$@"
