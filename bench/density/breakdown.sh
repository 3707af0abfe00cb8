#!/usr/bin/env bash
# Where an idle sandbox's host memory goes (issue 24), per sandbox of a running
# daemon: its memory cgroup (usage, and the cache/rss/shmem split), the Sentry
# process (RssAnon: the Sentry's Go heap and stacks; RssShmem: the guest memory
# file pages the Sentry has mapped; PSS), the gofer's PSS if there is one, the
# guest's own /proc/meminfo, and the anonymous memory of the python3 and node
# processes inside (VmRSS and VmData of their /proc/<pid>/status as the
# Sentry reports it; VmRSS counts mapped file pages too).
#
#   RUNSC_ROOT=/var/lib/airlock-x/runsc bash bench/density/breakdown.sh [sandbox-id...]
#
# Without ids it reads every sandbox under RUNSC_ROOT. Run as root, e.g. after
# `go run ./bench/density -keep …`. Prints one line per sandbox, then the means.
set -euo pipefail
: "${RUNSC_ROOT:?set RUNSC_ROOT to the runsc root of the daemon, <data-dir>/runsc}"
RUNSC=${RUNSC:-$(ls -d /var/cache/airlock/runsc/*/runsc | tail -1)}
R=("$RUNSC" --root "$RUNSC_ROOT")
ids=("$@")
if [ ${#ids[@]} -eq 0 ]; then
	mapfile -t ids < <("${R[@]}" list -quiet 2>/dev/null)
fi
# Run inside each sandbox: MemTotal - MemAvailable (what the guest counts as
# used), then "comm VmRSS VmData" (KiB, as the Sentry counts them) of each python3 and node process.
INSIDE='awk "/^MemTotal:/{t=\$2} /^MemAvailable:/{a=\$2} END{print t-a}" /proc/meminfo
for d in /proc/[0-9]*; do
	c=$(cat $d/comm 2>/dev/null) || continue
	case $c in
	python3* | node) echo "$c $(awk "/^VmRSS:/{print \$2}" $d/status) $(awk "/^VmData:/{print \$2}" $d/status)" ;;
	esac
done'
kib() { awk -v k="$2" '$1==k":" {print $2; f=1} END {if (!f) print 0}' "$1" 2>/dev/null || echo 0; }
mib() { echo $(( ${1:-0} / 1024 )); }
printf '%-24s %6s %6s %6s %6s | %6s %6s %6s %6s | %6s | %6s %6s | %6s %6s\n' sandbox cg cgrss cgshm cgcache \
	sAnon sShm sPSS gPSS gUsed pyRSS pyData nodeRSS nodeData
sum=()
for id in "${ids[@]}"; do
	sb=$(pgrep -f "runsc-sandbox .*boot .*/$id( |\$)" | head -1 || true)
	[ -n "$sb" ] || sb=$(pgrep -f "runsc-sandbox .*$id" | head -1 || true)
	[ -n "$sb" ] || continue
	gofer=$(pgrep -f "runsc-gofer .*$id" | head -1 || true)
	cgp=$(awk -F: '$2=="memory" {print $3}' /proc/$sb/cgroup)
	cgd=/sys/fs/cgroup/memory$cgp
	cg=$(( $(cat $cgd/memory.usage_in_bytes 2>/dev/null || echo 0) / 1024 ))
	st=$cgd/memory.stat
	cgrss=$(( $(awk '$1=="total_rss"{print $2}' $st 2>/dev/null || echo 0) / 1024 ))
	cgshm=$(( $(awk '$1=="total_shmem"{print $2}' $st 2>/dev/null || echo 0) / 1024 ))
	cgcache=$(( $(awk '$1=="total_cache"{print $2}' $st 2>/dev/null || echo 0) / 1024 ))
	sanon=$(kib /proc/$sb/status RssAnon)
	sshm=$(kib /proc/$sb/status RssShmem)
	spss=$(kib /proc/$sb/smaps_rollup Pss)
	gpss=0
	[ -n "$gofer" ] && gpss=$(kib /proc/$gofer/smaps_rollup Pss)
	inside=$("${R[@]}" exec "$id" /bin/sh -c "$INSIDE" 2>/dev/null || true)
	gused=$(echo "$inside" | head -1)
	pya=$(echo "$inside" | awk '$1 ~ /^python3/ {s+=$2} END {print s+0}')
	pyr=$(echo "$inside" | awk '$1 ~ /^python3/ {s+=$3} END {print s+0}')
	noa=$(echo "$inside" | awk '$1=="node" {s+=$2} END {print s+0}')
	nor=$(echo "$inside" | awk '$1=="node" {s+=$3} END {print s+0}')
	vals=($cg $cgrss $cgshm $cgcache $sanon $sshm $spss $gpss ${gused:-0} $pya $pyr $noa $nor)
	printf '%-24s %6s %6s %6s %6s | %6s %6s %6s %6s | %6s | %6s %6s | %6s %6s\n' "$id" \
		$(for v in "${vals[@]}"; do mib "$v"; done)
	for i in "${!vals[@]}"; do sum[$i]=$(( ${sum[$i]:-0} + vals[i] )); done
	n=$(( ${n:-0} + 1 ))
done
if [ "${n:-0}" -gt 0 ]; then
	printf '%-24s' "mean of $n (MiB)"
	for i in "${!sum[@]}"; do
		[ "$i" = 4 ] || [ "$i" = 8 ] || [ "$i" = 9 ] || [ "$i" = 11 ] && printf ' |'
		printf ' %6s' $(( sum[i] / n / 1024 ))
	done
	echo
fi
