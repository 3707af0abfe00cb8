#!/usr/bin/env bash
# The memory floor of an idle code-interpreter sandbox (issue 24): bare runsc
# sandboxes (the daemon's runsc and platform, no agent, no network) running
#   py:     python3 with the warm-up imports (numpy, pandas, matplotlib.pyplot);
#   kernel: an ipykernel (IPKernelApp, as the agent starts it) that ran the same
#           imports, idle;
# on the template's root filesystem (read-only, writes in memory). Prints, per
# sandbox, the PSS of its host processes (runsc sandbox, gofer, systrap stubs)
# and the Sentry's own memory accounting (`runsc events --stats`), next to the
# same figures of a sandbox of a running daemon when AIRLOCK_RUNSC_ROOT and
# SANDBOX are given (that daemon's --data-dir/runsc and a sandbox id).
#
#   ROOTFS=/var/lib/airlock-x/templates/<hash of code-interpreter-v1>/rootfs \
#   RUNSC=/var/cache/airlock/runsc/<version>/runsc bash bench/density/pyfloor.sh
# Needs root. SETTLE (default 20) seconds between the start and the reading.
set -euo pipefail
: "${ROOTFS:?set ROOTFS to a code-interpreter template rootfs}"
: "${RUNSC:?set RUNSC to the runsc binary the daemon uses}"
SETTLE=${SETTLE:-20}
WORK=$(mktemp -d /tmp/pyfloor.XXXXXX)
ROOT=$WORK/runsc-root
mkdir -p "$ROOT"
RUN=(--root "$ROOT" --platform=systrap --network=none --overlay2=root:memory)
IDS=()
cleanup() {
	for id in "${IDS[@]}"; do "$RUNSC" "${RUN[@]}" kill "$id" KILL >/dev/null 2>&1 || true; "$RUNSC" "${RUN[@]}" delete -force "$id" >/dev/null 2>&1 || true; done
	for f in "$ROOT"/*netns; do if [ -e "$f" ]; then umount "$f" 2>/dev/null || true; fi; done
	rm -rf "$WORK"
}
trap cleanup EXIT

KERNEL='
import time
from ipykernel import kernelapp
app = kernelapp.IPKernelApp.instance()
app.initialize(["-f", "/tmp/k.json"])
app.shell.run_cell("import numpy, pandas, matplotlib\nimport matplotlib.pyplot", silent=True)
app.start()
'
start() { # name, python code
	local b=$WORK/$1
	mkdir -p "$b"
	(cd "$b" && "$RUNSC" spec -- /usr/bin/python3 -c "$2")
	jq --arg r "$ROOTFS" '.root = {path: $r, readonly: true} | .process.terminal = false | .process.env += ["HOME=/root"]' "$b/config.json" >"$b/c" && mv "$b/c" "$b/config.json"
	"$RUNSC" "${RUN[@]}" run --detach --bundle "$b" "$1" </dev/null >"$b/out" 2>&1
	IDS+=("$1")
}
pss() { # pids... → PSS in MiB of those processes and their descendants
	local all=() p
	for p in "$@"; do all+=("$p") ; all+=($(pgrep -P "$p" 2>/dev/null || true)); done
	local kb=0
	for p in "${all[@]}"; do kb=$((kb + $(awk '/^Pss:/{print $2}' /proc/$p/smaps_rollup 2>/dev/null || echo 0))); done
	echo $((kb / 1024))
}
report() { # label, runsc root, id
	local st sb gofer
	st=$("$RUNSC" --root "$2" events --stats "$3" 2>/dev/null || echo '{}')
	sb=$(pgrep -f "runsc-sandbox .*$3" | head -1 || true)
	gofer=$(pgrep -f "runsc-gofer .*$3" | head -1 || true)
	printf '%-34s PSS %5s MiB   Sentry usage %5s MiB\n' "$1" "$(pss $sb $gofer)" \
		"$(echo "$st" | jq -r '((.data.memory.usage.usage // 0) / 1048576 | floor)')"
}
start pyfloor-py 'import numpy, pandas, matplotlib, matplotlib.pyplot, time
time.sleep(10**6)'
start pyfloor-kernel "$KERNEL"
sleep "$SETTLE"
report "bare runsc: python3 + imports" "$ROOT" pyfloor-py
report "bare runsc: ipykernel + imports" "$ROOT" pyfloor-kernel
if [ -n "${AIRLOCK_RUNSC_ROOT:-}" ] && [ -n "${SANDBOX:-}" ]; then
	report "Airlock sandbox $SANDBOX" "$AIRLOCK_RUNSC_ROOT" "$SANDBOX"
fi
