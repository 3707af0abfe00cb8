#!/usr/bin/env node
// Benchmarks snapshot-based creates of a running Airlock daemon through the
// official SDKs and prints p50/p99 for, in the SAME run:
//   create → first runCode result (code-interpreter-v1) for
//     cold boot      (create body memoryMB 513: no boot snapshot matches)
//     boot snapshot  (allow_internet_access false: the warm pool only holds
//                     default-network sandboxes, so this restores the boot
//                     snapshot)
//     warm pool      (default create; a pause between samples lets the pool
//                     refill)
//   named snapshot create (POST /sandboxes/{id}/snapshots, x = 41 in the kernel)
//   create from that snapshot → first runCode result (x + 1)
//   memory: PSS (from /proc/<pid>/smaps_rollup of every runsc process of the
//     sandboxes; shared pages counted once) of 20 idle forks vs 20 fresh
//     sandboxes of `base` (needs root).
// Start the daemon with --warm-pool code-interpreter-v1=1 (boot snapshots are
// on by default) and wait for "boot snapshot ready" in its log.
//
// Side by side (BENCH_TARGETS="gvisor=http://127.0.0.1:A,microvm=http://127.0.0.1:B",
// one API key for both, each daemon started as above): only the three
// create → first runCode rows, per target, samples interleaved across the
// targets in the same run (bench/snapshots-runtimes.sh starts both daemons).
//
// Environment: E2B_API_URL/E2B_API_KEY (or AIRLOCK_URL/AIRLOCK_API_KEY);
// BENCH_N (samples per create mode, default 10), BENCH_N_MEM (default 20),
// BENCH_TARGETS (see above).
import { readdirSync, readFileSync } from 'node:fs'
import { randomBytes } from 'node:crypto'
import { daemon, loadSDK } from './sdk.mjs'

const { apiURL, apiKey } = daemon('snapshots')
const { Sandbox } = await loadSDK('@e2b/code-interpreter')

const N = Number(process.env.BENCH_N || 10)
const NMEM = Number(process.env.BENCH_N_MEM || 20)
const metadata = { bench: `snapshots-${randomBytes(4).toString('hex')}` }
const live = new Map() // sandbox id → target
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

// name=url pairs of daemons to compare; one unnamed target otherwise.
const targets = (process.env.BENCH_TARGETS || `daemon=${apiURL}`).split(',').map((kv) => {
  const i = kv.indexOf('=')
  return { name: kv.slice(0, i), url: kv.slice(i + 1) }
})
const sideBySide = Boolean(process.env.BENCH_TARGETS)
const conn = (tg) => ({ apiUrl: tg.url, sandboxUrl: tg.url, apiKey })

async function api (method, path, body, base = apiURL) {
  const res = await fetch(base + path, {
    method,
    headers: { 'X-API-Key': apiKey, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body)
  })
  const text = await res.text()
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`)
  return text ? JSON.parse(text) : null
}

/** Raw create (so the body can steer the path), then the SDK connects. */
async function createRaw (template, extra = {}, tg = targets[0]) {
  const s = await api('POST', '/v2/sandboxes', { templateID: template, timeout: 600, metadata, ...extra }, tg.url)
  live.set(s.sandboxID, tg)
  return s
}
async function killAll () {
  await Promise.allSettled([...live].map(([id, tg]) => Sandbox.kill(id, conn(tg))))
  live.clear()
}
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => { killAll().finally(() => process.exit(130)) })

function pct (xs, p) {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.max(0, Math.min(s.length - 1, Math.ceil(p / 100 * s.length) - 1))]
}
const rows = []
function row (what, xs, note = '') {
  rows.push([what, `${pct(xs, 50).toFixed(0)} ms`, `${pct(xs, 99).toFixed(0)} ms`, `n=${xs.length}`, note])
}

/** create → first runCode result, n times. */
async function createToResult (n, extra, gapMs, code = '6 * 7', want = '42', template = 'code-interpreter-v1') {
  return (await createToResultOn([targets[0]], n, extra, gapMs, code, want, template))[0]
}

/** Like createToResult on each target, samples interleaved; one array per target. */
async function createToResultOn (tgs, n, extra, gapMs, code = '6 * 7', want = '42', template = 'code-interpreter-v1') {
  const xs = tgs.map(() => [])
  for (let i = 0; i < n; i++) {
    if (gapMs) await sleep(gapMs)
    for (const [j, tg] of tgs.entries()) {
      const t0 = performance.now()
      const s = await createRaw(template, extra, tg)
      const sbx = await Sandbox.connect(s.sandboxID, conn(tg))
      const r = await sbx.runCode(code)
      xs[j].push(performance.now() - t0)
      if (r.error || r.text !== want) throw new Error(`${tg.name}: runCode: ${r.error?.value ?? r.text}`)
      await Sandbox.kill(s.sandboxID, conn(tg))
      live.delete(s.sandboxID)
    }
  }
  return xs
}

/** Sum of Pss over the processes whose command line names one of ids. */
function pssKB (ids) {
  let total = 0
  let procs = 0
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    let cmd
    try { cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8') } catch { continue }
    if (!cmd.includes('runsc') || !ids.some((id) => cmd.includes(id))) continue
    try {
      const m = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8').match(/^Pss:\s+(\d+) kB/m)
      if (m) { total += Number(m[1]); procs++ }
    } catch {}
  }
  return { total, procs }
}

if (sideBySide) {
  try {
    await createToResultOn(targets, 1, { memoryMB: 513 }, 0) // warm-up
    const modes = [
      ['cold boot', { memoryMB: 513 }, 0, 'memoryMB 513 (no boot snapshot)'],
      ['boot snapshot', { allow_internet_access: false }, 0, 'restore of the boot snapshot'],
      ['warm pool', {}, 3000, '3 s between creates for the refill']
    ]
    for (const [what, extra, gap, note] of modes) {
      const xs = await createToResultOn(targets, N, extra, gap)
      for (const [j, tg] of targets.entries()) row(`${tg.name}: create → first runCode: ${what}`, xs[j], note)
    }
  } finally {
    await killAll()
  }
  printRows()
  process.exit(0)
}

try {
  // Warm-up: one of each so first-time costs do not land in a sample.
  await createToResult(1, { memoryMB: 513 }, 0)

  row('create → first runCode: cold boot', await createToResult(N, { memoryMB: 513 }, 0), 'memoryMB 513 (no boot snapshot)')
  row('create → first runCode: boot snapshot', await createToResult(N, { allow_internet_access: false }, 0), 'restore of the boot snapshot')
  row('create → first runCode: warm pool', await createToResult(N, {}, 3000), '3 s between creates for the refill')

  // Named snapshot: create, and create from it.
  const src = await createRaw('code-interpreter-v1', { memoryMB: 513 })
  const srcSbx = await Sandbox.connect(src.sandboxID)
  await srcSbx.runCode('x = 41')
  const snapTimes = []
  const snaps = []
  for (let i = 0; i < Math.min(N, 5); i++) {
    // The source is restored in the background after each snapshot: wait
    // until it answers again so a sample does not include that wait.
    if ((await srcSbx.runCode('x')).text !== '41') throw new Error('source lost its state')
    const t0 = performance.now()
    const s = await api('POST', `/sandboxes/${src.sandboxID}/snapshots`, {})
    snapTimes.push(performance.now() - t0)
    snaps.push(s.snapshotID)
  }
  row('named snapshot create (interpreter, x = 41)', snapTimes, 'sandbox keeps running')
  row('create from named snapshot → first runCode', await createToResult(N, {}, 0, 'x + 1', '42', snaps[0]), 'x + 1 → 42')
  for (const id of snaps) await api('DELETE', `/templates/${id}`)
  await killAll()

  // Memory: 20 fresh (cold) base sandboxes vs 20 idle forks of one.
  if (process.getuid?.() === 0) {
    const fresh = []
    for (let i = 0; i < NMEM; i++) fresh.push((await createRaw('base', { memoryMB: 513 })).sandboxID)
    await sleep(3000)
    const f = pssKB(fresh)
    await killAll()
    const parent = await createRaw('base', { memoryMB: 513 })
    const kids = await api('POST', `/sandboxes/${parent.sandboxID}/fork`, { count: NMEM, timeout: 600 })
    const kidIDs = kids.filter((k) => k.sandbox).map((k) => k.sandbox.sandboxID)
    for (const id of kidIDs) live.set(id, targets[0])
    await sleep(3000)
    const k = pssKB(kidIDs)
    rows.push([`PSS of ${NMEM} fresh base sandboxes`, `${(f.total / 1024).toFixed(0)} MiB`, '', `${f.procs} runsc processes`, `${(f.total / 1024 / NMEM).toFixed(1)} MiB each`])
    rows.push([`PSS of ${kidIDs.length} idle forks of one`, `${(k.total / 1024).toFixed(0)} MiB`, '', `${k.procs} runsc processes`, `${(k.total / 1024 / Math.max(1, kidIDs.length)).toFixed(1)} MiB each`])
  } else {
    rows.push(['PSS of forks vs fresh sandboxes', 'skipped', '', '', 'needs root to read /proc/*/smaps_rollup'])
  }
} finally {
  await killAll()
}

printRows()

function printRows () {
  const widths = [0, 1, 2, 3].map((i) => Math.max(...rows.map((r) => r[i].length), 10))
  console.log(['measurement', 'p50', 'p99', 'n'].map((h, i) => h.padEnd(widths[i])).join('  '))
  for (const r of rows) console.log(r.slice(0, 4).map((c, i) => c.padEnd(widths[i])).join('  ') + '  ' + r[4])
}
