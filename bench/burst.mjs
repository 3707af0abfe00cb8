#!/usr/bin/env node
// Benchmarks bursts of creates against a running Airlock daemon started
// with default flags (automatic warm pool) through the official
// @e2b/code-interpreter SDK, and prints a table, in the SAME run:
//   N in a row   create → first runCode("1+1") result, each sandbox killed
//                after its cell, no pause between creates (the pool refills
//                in the background)
//   baseline     the same in a row with allow_internet_access false (the
//                pool only holds default-network sandboxes, so every create
//                restores the boot snapshot)
//   C at once    C concurrent creates → first result, wall time
// Environment: E2B_API_URL/E2B_API_KEY (or AIRLOCK_URL/AIRLOCK_API_KEY);
// BENCH_N (default 50), BENCH_C (default 10), BENCH_ROUNDS for the
// concurrent case (default 3, 20 s apart so the pool refills).
import { daemon, loadSDK } from './sdk.mjs'

daemon('burst')
const { Sandbox } = await loadSDK('@e2b/code-interpreter')

const N = Number(process.env.BENCH_N || 50)
const C = Number(process.env.BENCH_C || 10)
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3)
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)]
}

async function createAndRun (opts) {
  const start = performance.now()
  const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { bench: 'burst' }, ...opts })
  const ex = await sbx.runCode('1+1')
  const ms = performance.now() - start
  if (ex.text !== '2') throw new Error(`runCode gave ${JSON.stringify(ex.text)}`)
  return { sbx, ms }
}

async function inARow (opts) {
  const ms = []
  for (let i = 0; i < N; i++) {
    const r = await createAndRun(opts)
    ms.push(r.ms)
    await r.sbx.kill()
  }
  return ms
}

const rows = []
const row = (name, xs) => rows.push({ name, n: xs.length, p50: pct(xs, 0.5), p99: pct(xs, 0.99), max: Math.max(...xs) })

const base = await inARow({ allowInternetAccess: false })
row(`${N} in a row, boot snapshot (baseline)`, base)
await sleep(20_000) // the pool refills
const pooled = await inARow({})
row(`${N} in a row, default flags`, pooled)

const walls = []
for (let r = 0; r < ROUNDS; r++) {
  await sleep(20_000)
  const start = performance.now()
  const got = await Promise.all(Array.from({ length: C }, () => createAndRun({})))
  walls.push(performance.now() - start)
  await Promise.all(got.map((g) => g.sbx.kill()))
}
row(`${C} at once, wall time (${ROUNDS} rounds)`, walls)

const f = (v) => `${Math.round(v)} ms`
console.log('| create → first runCode result | n | p50 | p99 | max | p50 vs baseline |')
console.log('| --- | ---: | ---: | ---: | ---: | ---: |')
for (const r of rows) {
  console.log(`| ${r.name} | ${r.n} | ${f(r.p50)} | ${f(r.p99)} | ${f(r.max)} | ${(r.p50 / rows[0].p50).toFixed(2)}× |`)
}
