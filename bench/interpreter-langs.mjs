#!/usr/bin/env node
// What R and Java contexts cost in code-interpreter-v1 (issue 26 item 7),
// through the official @e2b/code-interpreter SDK against a running daemon:
//   - create of a code-interpreter-v1 sandbox (p50/p99; run this bench against
//     a daemon on the template without R/Java for the baseline),
//   - the first cell of a language in a fresh sandbox (its kernel start
//     included) and the next one, for Python (the same-run baseline), R, Java,
//   - the sandbox's memory idle with the default contexts only, then with an
//     R or a Java context started and idle (`free` inside the sandbox, and
//     the R or java process's RSS),
//   - pause + resume (betaPause, then connect) with the default contexts only
//     and with an R or a Java context alive.
// With BENCH_LANGS=0 only the create row runs (the baseline daemon has no
// R or Java).
//
// Environment: E2B_API_URL/E2B_API_KEY (or AIRLOCK_URL/AIRLOCK_API_KEY);
// BENCH_N (default 5) samples per row, BENCH_N_CREATE (default 10).
import { randomBytes } from 'node:crypto'
import { daemon, loadSDK } from './sdk.mjs'

const { apiURL } = daemon('interpreter-langs')
const { Sandbox } = await loadSDK('@e2b/code-interpreter')

const N = Number(process.env.BENCH_N || 5)
const NCREATE = Number(process.env.BENCH_N_CREATE || 10)
const LANGS = process.env.BENCH_LANGS !== '0'
const metadata = { bench: `interpreter-langs-${randomBytes(4).toString('hex')}` }
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
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => { Promise.allSettled([...live].map((s) => s.kill())).finally(() => process.exit(130)) })
}

function pct (xs, p) {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]
}
const fmt = (ms) => ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(0)} ms`
const rows = []
function row (name, xs, unit = 'ms') {
  rows.push({ name, xs, unit })
  const f = unit === 'ms' ? fmt : (v) => `${v.toFixed(0)} ${unit}`
  console.error(`  ${name}: p50 ${f(pct(xs, 50))} p99 ${f(pct(xs, 99))} (n=${xs.length})`)
}

async function timed (fn) {
  const t = performance.now()
  await fn()
  return performance.now() - t
}

async function runOK (sbx, code, opts = {}) {
  const ex = await sbx.runCode(code, { timeoutMs: 300_000, ...opts })
  if (ex.error) throw new Error(`${JSON.stringify(code)}: ${ex.error.name}: ${ex.error.value}`)
  return ex
}

// usedMiB is the sandbox's used memory as `free` inside it reports it, and
// the RSS (MiB) of its R and java processes.
async function memory (sbx) {
  const r = await sbx.commands.run("free -k | awk '/^Mem:/ {print $3}'; ps -eo rss=,comm= | awk '$2 ~ /^(R|java)$/ {s += $1} END {print s + 0}'")
  const [used, langs] = r.stdout.trim().split('\n').map(Number)
  return { used: used / 1024, langs: langs / 1024 }
}
const settle = () => new Promise((resolve) => setTimeout(resolve, 10_000))

console.error(`interpreter-langs bench against ${apiURL}: N=${N}, creates ${NCREATE}`)

const creates = []
for (let i = 0; i < NCREATE; i++) {
  let sbx
  creates.push(await timed(async () => { sbx = await create() }))
  await kill(sbx)
}
if (NCREATE > 0) row('create code-interpreter-v1', creates)

if (LANGS) {
  const first = { python: [], r: [], java: [] }
  const second = { python: [], r: [], java: [] }
  const code = { python: '1 + 1', r: '1 + 1', java: '1 + 1' }
  for (let i = 0; i < N; i++) {
    const sbx = await create()
    for (const lang of ['python', 'r', 'java']) {
      first[lang].push(await timed(() => runOK(sbx, code[lang], { language: lang })))
      second[lang].push(await timed(() => runOK(sbx, code[lang], { language: lang })))
    }
    await kill(sbx)
  }
  for (const lang of ['python', 'r', 'java']) {
    row(`first ${lang} cell in a new sandbox (kernel start)`, first[lang])
    row(`next ${lang} cell`, second[lang])
  }

  // One language at a time: R and Java next to the default Python and
  // JavaScript kernels do not fit in the default 576 MiB together.
  const pause = { base: [], r: [], java: [] }
  const mem = { base: [], r: [], java: [] }
  const rss = { r: [], java: [] }
  for (let i = 0; i < N; i++) {
    for (const lang of ['r', 'java']) {
      const sbx = await create()
      await runOK(sbx, '1 + 1')
      await settle()
      if (lang === 'r') {
        mem.base.push((await memory(sbx)).used)
        pause.base.push(await timed(async () => { await sbx.betaPause(); await Sandbox.connect(sbx.sandboxId) }))
      }
      await runOK(sbx, '1 + 1', { language: lang })
      await settle()
      const m = await memory(sbx)
      mem[lang].push(m.used)
      rss[lang].push(m.langs)
      pause[lang].push(await timed(async () => { await sbx.betaPause(); await Sandbox.connect(sbx.sandboxId) }))
      await runOK(sbx, '1 + 1', { language: lang })
      await kill(sbx)
    }
  }
  row('sandbox memory used, idle, default contexts', mem.base, 'MiB')
  row('sandbox memory used, idle, + an R context', mem.r, 'MiB')
  row('sandbox memory used, idle, + a Java context', mem.java, 'MiB')
  row('RSS of the R process', rss.r, 'MiB')
  row('RSS of the java process', rss.java, 'MiB')
  row('pause + resume, default contexts', pause.base)
  row('pause + resume, + an R context', pause.r)
  row('pause + resume, + a Java context', pause.java)
}

console.log('| measurement | p50 | p99 | n |')
console.log('|---|---|---|---|')
for (const r of rows) {
  const f = r.unit === 'ms' ? fmt : (v) => `${v.toFixed(0)} ${r.unit}`
  console.log(`| ${r.name} | ${f(pct(r.xs, 50))} | ${f(pct(r.xs, 99))} | ${r.xs.length} |`)
}
