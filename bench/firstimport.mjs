#!/usr/bin/env node
// The first `import pandas` of a code-interpreter sandbox, per template
// (issue 24: the template chooses the interpreter's warm-up,
// /etc/airlock/interpreter-warmup.py; without the default one an idle sandbox
// holds less memory and the user's first import pays for it). Per sandbox:
// create → runCode("1+1") (the first request into a restored sandbox, slow
// whatever it is) → the first `import pandas` cell → a second one (the
// floor: a cell that imports nothing new) → `import matplotlib.pyplot`.
// The templates take turns, one sandbox each, BENCH_N (default 8) rounds,
// each sandbox killed before the next, so they share the host's conditions.
// Prints p50/p99 per template and row; "in the kernel" is the import's own
// time.perf_counter() span.
//
//   BENCH_TEMPLATES="code-interpreter-v1 ci-lean" BENCH_N=8 node bench/firstimport.mjs
//
// Environment: E2B_API_URL/E2B_API_KEY (or AIRLOCK_URL/AIRLOCK_API_KEY).
import { daemon, loadSDK, pct, timed } from './sdk.mjs'

daemon('firstimport')
const { Sandbox } = await loadSDK('@e2b/code-interpreter')
const N = Number(process.env.BENCH_N || 8)
const templates = (process.env.BENCH_TEMPLATES || 'code-interpreter-v1').split(/\s+/).filter(Boolean)

// inKernel runs an import and prints its own duration in ms.
const inKernel = (stmt) => `import time as _t\n_s = _t.perf_counter()\n${stmt}\nprint(round((_t.perf_counter() - _s) * 1000, 1))`

const names = ['create', 'first cell runCode("1+1")', 'first `import pandas` cell', '  of which in the kernel',
  'second `import pandas` cell (floor)', '`import matplotlib.pyplot` cell']
const rows = Object.fromEntries(templates.map((t) => [t, Object.fromEntries(names.map((n) => [n, []]))]))
for (let i = 0; i < N; i++) {
  for (const tpl of templates) {
    const [c, sbx] = await timed(() => Sandbox.create(tpl, { timeoutMs: 120_000 }))
    try {
      const [one, p] = await timed(() => sbx.runCode('1+1'))
      if (p.text !== '2') throw new Error(`${tpl}: 1+1: ${JSON.stringify(p)}`)
      const [first, a] = await timed(() => sbx.runCode(inKernel('import pandas')))
      const [second, b] = await timed(() => sbx.runCode('import pandas'))
      const [mpl, m] = await timed(() => sbx.runCode('import matplotlib.pyplot'))
      for (const r of [a, b, m]) if (r.error) throw new Error(`${tpl}: ${JSON.stringify(r.error)}`)
      const r = rows[tpl]
      r[names[0]].push(c)
      r[names[1]].push(one)
      r[names[2]].push(first)
      r[names[3]].push(Number(a.logs.stdout.join('').trim()))
      r[names[4]].push(second)
      r[names[5]].push(mpl)
    } finally {
      await sbx.kill().catch(() => {})
    }
  }
}
for (const tpl of templates) {
  console.log(`template ${tpl}`)
  for (const [k, xs] of Object.entries(rows[tpl])) {
    console.log(`  ${k.padEnd(38)} p50 ${pct(xs, 50).toFixed(1).padStart(7)} ms   p99 ${pct(xs, 99).toFixed(1).padStart(7)} ms   (n=${xs.length})`)
  }
}
