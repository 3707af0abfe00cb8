#!/usr/bin/env node
// Benchmarks the stateful code interpreter of a running Airlock daemon through
// the official @e2b/code-interpreter SDK and prints a table (p50/p99/n) next
// to host baselines measured in the same run and the anchors from the issue.
//
// Environment: E2B_API_URL/E2B_API_KEY (or AIRLOCK_URL/AIRLOCK_API_KEY);
// E2B_SANDBOX_URL defaults to the API URL. The SDK is loaded from
// test/e2e/node_modules (run `npm ci` there first; bench/run.sh does).
// Optional: BENCH_HOST_PYTHON (default /usr/bin/python3, needs pandas).
import { spawnSync } from 'node:child_process'
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { randomBytes } from 'node:crypto'
import { daemon, loadSDK } from './sdk.mjs'

const { apiURL, apiKey } = daemon('interpreter')
const { Sandbox } = await loadSDK('@e2b/code-interpreter')

const hostPython = process.env.BENCH_HOST_PYTHON || '/usr/bin/python3'
const N = {
  roundTrip: Number(process.env.BENCH_N_ROUNDTRIP || 50),
  create: Number(process.env.BENCH_N_CREATE || 10),
  pandas: Number(process.env.BENCH_N_PANDAS || 10),
  pandasCreate: Number(process.env.BENCH_N_PANDAS_CREATE || 5)
}
const metadata = { bench: `interpreter-${randomBytes(4).toString('hex')}` }
const live = new Set()

async function create () {
  const sbx = await Sandbox.create({ timeoutMs: 600_000, metadata })
  live.add(sbx)
  return sbx
}
async function kill (sbx) {
  live.delete(sbx)
  await sbx.kill().catch(() => {})
}
async function killAll () {
  await Promise.allSettled([...live].map((s) => s.kill()))
  live.clear()
}
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => { killAll().finally(() => process.exit(130)) })
}

/** Runs fn n times sequentially; returns the durations in milliseconds. */
async function measure (n, fn) {
  const out = []
  for (let i = 0; i < n; i++) {
    const t = performance.now()
    await fn(i)
    out.push(performance.now() - t)
  }
  return out
}

function pct (xs, p) {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]
}

function fmt (ms) {
  return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(1)} ms`
}

// ~1 MB CSV: city,amount,qty with known per-city sums.
const CITIES = ['amsterdam', 'berlin', 'cairo', 'delhi', 'eindhoven', 'florence', 'geneva', 'houston']
function makeCSV () {
  const rows = ['city,amount,qty']
  const sums = Object.fromEntries(CITIES.map((c) => [c, 0]))
  let size = 0
  for (let i = 0; size < 1_000_000; i++) {
    const city = CITIES[i % CITIES.length]
    const amount = (i * 7919) % 10_000
    const row = `${city},${amount},${i % 13}`
    rows.push(row)
    sums[city] += amount
    size += row.length + 1
  }
  return { csv: rows.join('\n') + '\n', sums, rows: rows.length - 1 }
}

const pandasCode = (path) => [
  'import pandas as pd',
  `df = pd.read_csv(${JSON.stringify(path)})`,
  "g = df.groupby('city').agg(amount=('amount', 'sum'), qty=('qty', 'mean'))",
  'for city, row in g.iterrows():',
  "    print(f'{city} {int(row.amount)} {row.qty:.3f}')"
].join('\n')

function checkPandas (stdout, sums) {
  for (const [city, sum] of Object.entries(sums)) {
    if (!new RegExp(`^${city} ${sum} `, 'm').test(stdout)) {
      throw new Error(`pandas output is wrong for ${city} (want ${sum}):\n${stdout.slice(0, 500)}`)
    }
  }
}

async function runOK (sbx, code, opts) {
  const ex = await sbx.runCode(code, { timeoutMs: 120_000, ...opts })
  if (ex.error) throw new Error(`${ex.error.name}: ${ex.error.value}`)
  return ex
}

function hostRun (args) {
  const r = spawnSync(hostPython, args, { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`${hostPython} ${args[0]}: exit ${r.status}: ${r.stderr}`)
  return r.stdout
}

const rows = []
function row (name, xs, note = '') {
  rows.push({ name, n: xs.length, p50: pct(xs, 50), p99: pct(xs, 99), note })
  console.error(`  ${name}: p50 ${fmt(pct(xs, 50))} p99 ${fmt(pct(xs, 99))} (n=${xs.length})`)
}

const { csv, sums, rows: csvRows } = makeCSV()
const remoteCSV = '/home/user/bench.csv'
console.error(`interpreter bench against ${apiURL} (CSV ${(csv.length / 1e6).toFixed(2)} MB, ${csvRows} rows)`)

try {
  // Warm sandbox: round trip and pandas on a sandbox whose kernel is up.
  const warm = await create()
  await runOK(warm, 'import pandas')
  await runOK(warm, '1+1')
  const rt = await measure(N.roundTrip, async () => {
    const ex = await runOK(warm, '1+1')
    if (ex.text !== '2') throw new Error(`1+1 gave ${ex.text}`)
  })
  row('runCode("1+1") round trip, warm', rt)
  row('  baseline: host python3 -c 1+1 subprocess', await measure(N.roundTrip, () => hostRun(['-c', '1+1'])))

  const pw = await measure(N.pandas, async () => {
    await warm.files.write(remoteCSV, csv)
    checkPandas((await runOK(warm, pandasCode(remoteCSV))).logs.stdout.join(''), sums)
  })
  row('pandas groupby (upload 1 MB CSV + run), warm', pw)
  const dir = mkdtempSync(join(tmpdir(), 'airlock-bench-'))
  try {
    const local = join(dir, 'bench.csv')
    const hp = await measure(N.pandas, () => {
      writeFileSync(local, csv)
      checkPandas(hostRun(['-c', pandasCode(local)]), sums)
    })
    row('  baseline: host python3 subprocess, same script', hp)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
  await kill(warm)

  // Create to first result.
  const cf = []
  for (let i = 0; i < N.create; i++) {
    const t = performance.now()
    const sbx = await create()
    const ex = await runOK(sbx, '1+1')
    cf.push(performance.now() - t)
    if (ex.text !== '2') throw new Error(`1+1 gave ${ex.text}`)
    await kill(sbx)
  }
  row('Sandbox.create() + runCode("1+1")', cf)

  const pc = []
  for (let i = 0; i < N.pandasCreate; i++) {
    const t = performance.now()
    const sbx = await create()
    await sbx.files.write(remoteCSV, csv)
    const ex = await runOK(sbx, pandasCode(remoteCSV))
    pc.push(performance.now() - t)
    checkPandas(ex.logs.stdout.join(''), sums)
    await kill(sbx)
  }
  row('pandas groupby incl. Sandbox.create()', pc)
} finally {
  await killAll()
}

// The table.
const ratio = (a, b) => `${(a / b).toFixed(1)}x`
const byName = Object.fromEntries(rows.map((r) => [r.name.trim(), r]))
const rtRow = byName['runCode("1+1") round trip, warm']
const pwRow = byName['pandas groupby (upload 1 MB CSV + run), warm']
const pcRow = byName['pandas groupby incl. Sandbox.create()']
const cfRow = byName['Sandbox.create() + runCode("1+1")']
rtRow.note = `${ratio(rtRow.p50, byName['baseline: host python3 -c 1+1 subprocess'].p50)} host subprocess; goal < 0.1 s`
pwRow.note = `${ratio(pwRow.p50, byName['baseline: host python3 subprocess, same script'].p50)} host subprocess; goal < 0.1 s exec; E2B 0.34 s, Docker runner 1.90 s`
cfRow.note = 'goal < 0.5 s incl. create'
pcRow.note = `goal < 0.5 s incl. create; E2B 0.34 s, Docker runner 1.90 s; ${ratio(pcRow.p50, byName['baseline: host python3 subprocess, same script'].p50)} host subprocess`

const header = ['measurement', 'n', 'p50', 'p99', 'vs baseline / anchors']
const table = [header, ...rows.map((r) => [r.name, String(r.n), fmt(r.p50), fmt(r.p99), r.note])]
const widths = header.map((_, i) => Math.max(...table.map((t) => t[i].length)))
const line = (cells) => cells.map((c, i) => (i === 1 || i === 2 || i === 3 ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join('  ').trimEnd()
console.log('\nCode interpreter (@e2b/code-interpreter SDK)')
console.log(line(table[0]))
console.log(line(widths.map((w) => '-'.repeat(w))))
for (const t of table.slice(1)) console.log(line(t))
console.log('Anchors (issue): E2B 0.34 s, Docker-based runner 1.90 s per pandas task; goals < 0.1 s execution, < 0.5 s including sandbox create.')
