#!/usr/bin/env node
// The first JavaScript cell of a code-interpreter sandbox (issue 24: node for
// the default JavaScript context starts on that context's first use, not at
// boot): per sandbox, create → runCode("1+1") in Python, then the first
// JavaScript cell (`40 + 2`), then a second one; p50/p99 of each over
// BENCH_N (default 10) sandboxes, created one after another and killed.
// The first cell's extra time over the second is the on-demand node start
// (with an eager node it is the restored node's first touch).
//
// Environment: E2B_API_URL/E2B_API_KEY (or AIRLOCK_URL/AIRLOCK_API_KEY).
import { daemon, loadSDK, pct, timed } from './sdk.mjs'

daemon('firstjs')
const { Sandbox } = await loadSDK('@e2b/code-interpreter')
const N = Number(process.env.BENCH_N || 10)

const rows = { 'python runCode("1+1") (first cell)': [], 'first JavaScript cell': [], 'second JavaScript cell': [] }
for (let i = 0; i < N; i++) {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  try {
    const [py, p] = await timed(() => sbx.runCode('1+1'))
    if (p.text !== '2') throw new Error(`python: ${JSON.stringify(p)}`)
    const [j1, a] = await timed(() => sbx.runCode('40 + 2', { language: 'js' }))
    const [j2, b] = await timed(() => sbx.runCode('40 + 2', { language: 'js' }))
    if (a.text !== '42' || b.text !== '42') throw new Error(`javascript: ${JSON.stringify(a)} ${JSON.stringify(b)}`)
    rows['python runCode("1+1") (first cell)'].push(py)
    rows['first JavaScript cell'].push(j1)
    rows['second JavaScript cell'].push(j2)
  } finally {
    await sbx.kill().catch(() => {})
  }
}
for (const [k, xs] of Object.entries(rows)) {
  console.log(`${k.padEnd(40)} p50 ${pct(xs, 50).toFixed(0).padStart(6)} ms   p99 ${pct(xs, 99).toFixed(0).padStart(6)} ms   (n=${xs.length})`)
}
