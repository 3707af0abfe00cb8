// Volume throughput inside a sandbox (issue 27), one run: sequential write
// (dd, fsync at the end) and read of SIZE_MB, and the create rate of
// FILES small files, on a volume mounted in the sandbox, on the sandbox's own
// disk, and the same on the host (in the volume's host directory and in a
// plain directory on the data dir's filesystem).
//
//   E2B_API_URL=… E2B_API_KEY=… VOLUME=<name> VOLUME_DIR=<host dir> HOST_DIR=<dir> node bench/volumes/volumes.mjs
import { execFileSync } from 'node:child_process'
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'

const req = createRequire(new URL('../../test/e2e/package.json', import.meta.url))
const { Sandbox } = await import(pathToFileURL(req.resolve('e2b')).href)

const SIZE_MB = Number(process.env.SIZE_MB || 256)
const FILES = Number(process.env.FILES || 1000)
const ROUNDS = Number(process.env.ROUNDS || 3)

// The same shell work in the sandbox and on the host: prints
// "write_s read_s create_s" for directory $1.
const script = `set -e
d="$1"; f="$d/bench.bin"; rm -rf "$f" "$d/small"
t0=$(date +%s%N)
dd if=/dev/zero of="$f" bs=1M count=${SIZE_MB} conv=fsync status=none
t1=$(date +%s%N)
dd if="$f" of=/dev/null bs=1M status=none
t2=$(date +%s%N)
mkdir "$d/small"; i=0
while [ $i -lt ${FILES} ]; do echo x > "$d/small/$i"; i=$((i+1)); done
sync
t3=$(date +%s%N)
rm -rf "$f" "$d/small"
echo $(( (t1-t0)/1000 )) $(( (t2-t1)/1000 )) $(( (t3-t2)/1000 ))`

function row(where, us) {
  const [w, r, c] = us
  const mbps = (s) => (SIZE_MB / (s / 1e6)).toFixed(0)
  return `| ${where} | ${mbps(w)} | ${mbps(r)} | ${(FILES / (c / 1e6)).toFixed(0)} |`
}

function median(xs) { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)] }
function med3(runs) { return [0, 1, 2].map((i) => median(runs.map((r) => r[i]))) }

const sbx = await Sandbox.create('base', { volumeMounts: { '/mnt/vol': process.env.VOLUME }, timeoutMs: 600_000 })
try {
  const places = {
    'sandbox: volume (/mnt/vol)': (s) => sbx.commands.run(`bash -c '${s.replaceAll("'", "'\\''")}' _ /mnt/vol`, { timeoutMs: 300_000 }),
    'sandbox: own disk (/home/user)': (s) => sbx.commands.run(`bash -c '${s.replaceAll("'", "'\\''")}' _ /home/user`, { timeoutMs: 300_000 }),
  }
  const hosts = { 'host: volume dir': process.env.VOLUME_DIR, 'host: data dir': process.env.HOST_DIR }
  const out = []
  for (const [where, run] of Object.entries(places)) {
    const runs = []
    for (let i = 0; i < ROUNDS; i++) runs.push((await run(script)).stdout.trim().split(' ').map(Number))
    out.push(row(where, med3(runs)))
  }
  for (const [where, dir] of Object.entries(hosts)) {
    const runs = []
    for (let i = 0; i < ROUNDS; i++) runs.push(execFileSync('bash', ['-c', script, '_', dir]).toString().trim().split(' ').map(Number))
    out.push(row(where, med3(runs)))
  }
  console.log(`\nsequential ${SIZE_MB} MiB, ${FILES} small files, median of ${ROUNDS}\n`)
  console.log('| where | write MB/s (fsync) | read MB/s | small files/s |')
  console.log('|---|---|---|---|')
  for (const l of out) console.log(l)
} finally {
  await sbx.kill()
}
