#!/usr/bin/env bash
# The one command to set up and run Airlock: installs dependencies, builds,
# then runs `airlock serve` in the foreground. Extra arguments go to serve,
# e.g. scripts/run-daemon.sh --listen 127.0.0.1:49982 --data-dir /var/lib/airlock
# On a fresh host the runsc build goes on while the daemon starts: the daemon
# builds its default templates meanwhile and waits for runsc before serving.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
AIRLOCK_SETUP_RUNSC_WAIT=0 bash scripts/setup.sh >&2
exec "$(pwd)/bin/airlock" serve "$@"
