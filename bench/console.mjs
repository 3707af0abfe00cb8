#!/usr/bin/env node
// Benchmarks the web console's own endpoints on a running Airlock daemon and
// prints p50/p99 next to baselines measured in the same run:
//   - GET /console/api/overview vs GET /health (the cheapest API call);
//   - a keystroke's echo through the console terminal (WebSocket → daemon →
//     agent PTY → back) vs the same echo through the E2B SDK's own PTY
//     (sbx.pty: Connect straight to the agent through the proxy), same sandbox;
//   - the size of the console's page and assets.
//
// Run: node --experimental-websocket bench/console.mjs (Node 20; Node ≥ 22 has
// WebSocket built in). Environment: E2B_API_URL/E2B_API_KEY (or
// AIRLOCK_URL/AIRLOCK_API_KEY); BENCH_N iterations per case (default 100).
import { join } from 'node:path'
import { daemon, loadSDK } from './sdk.mjs'

const { apiURL, apiKey } = daemon('console', { exportEnv: false, trimSlash: true })
if (typeof WebSocket === 'undefined') {
  console.error('console bench: no WebSocket in this Node; run with --experimental-websocket (Node 20) or Node ≥ 22')
  process.exit(2)
}
const N = Number(process.env.BENCH_N || 100)
const { Sandbox } = await loadSDK('e2b', join('web', 'console')) // installed by scripts/setup.sh
const opts = { apiKey, apiUrl: apiURL, sandboxUrl: process.env.E2B_SANDBOX_URL || apiURL }

function pct (xs, p) {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]
}
function report (name, xs) {
  console.log(`${name.padEnd(44)} n=${String(xs.length).padEnd(4)} p50 ${pct(xs, 50).toFixed(2).padStart(7)} ms   p99 ${pct(xs, 99).toFixed(2).padStart(7)} ms`)
}
async function timeGET (path, headers) {
  const t = performance.now()
  const r = await fetch(apiURL + path, { headers })
  await r.arrayBuffer()
  if (!r.ok) throw new Error(`GET ${path}: ${r.status}`)
  return performance.now() - t
}

// Control-plane endpoints.
const health = []; const overview = []
for (let i = 0; i < N; i++) {
  health.push(await timeGET('/health', {}))
  overview.push(await timeGET('/console/api/overview', { 'X-API-Key': apiKey }))
}
report('baseline: GET /health', health)
report('GET /console/api/overview', overview)

// Page weight.
const index = await (await fetch(apiURL + '/console/')).text()
let bytes = index.length
for (const m of index.matchAll(/(?:src|href)="(\/console\/assets\/[^"]+)"/g)) {
  bytes += (await (await fetch(apiURL + m[1])).arrayBuffer()).byteLength
}
console.log(`console page + assets: ${(bytes / 1024).toFixed(0)} KiB (uncompressed)`)

// Keystroke echo: SDK PTY (baseline) vs console terminal.
const sbx = await Sandbox.create('base', { ...opts, timeoutMs: 300_000 })
try {
  const dec = new TextDecoder()
  let out = ''
  let waiter = null
  const onOut = (s) => { out += s; if (waiter && out.includes(waiter.mark)) { const w = waiter; waiter = null; w.resolve() } }
  const waitFor = (mark) => new Promise((resolve) => { if (out.includes(mark)) resolve(); else waiter = { mark, resolve } })

  const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => onOut(dec.decode(d, { stream: true })), timeoutMs: 300_000 })
  await sbx.pty.sendInput(h.pid, new TextEncoder().encode('stty -echoctl; PS1=; clear\n'))
  await new Promise((r) => setTimeout(r, 500))
  const sdk = []
  for (let i = 0; i < N; i++) {
    const mark = `k${i}q`
    out = ''
    const t = performance.now()
    await sbx.pty.sendInput(h.pid, new TextEncoder().encode(mark))
    await waitFor(mark)
    sdk.push(performance.now() - t)
    await sbx.pty.sendInput(h.pid, new TextEncoder().encode('\x15')) // ^U: clear the line
  }
  await sbx.pty.kill(h.pid)
  report('baseline: keystroke echo, SDK pty', sdk)

  const ws = new WebSocket(`${apiURL.replace(/^http/, 'ws')}/console/api/sandboxes/${sbx.sandboxId}/pty`)
  ws.binaryType = 'arraybuffer'
  ws.onmessage = (ev) => { if (typeof ev.data !== 'string') onOut(dec.decode(new Uint8Array(ev.data), { stream: true })) }
  await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = reject })
  ws.send(JSON.stringify({ type: 'auth', key: apiKey, cols: 80, rows: 24 }))
  ws.send(new TextEncoder().encode('PS1=; clear\n'))
  await new Promise((r) => setTimeout(r, 1000))
  const term = []
  for (let i = 0; i < N; i++) {
    const mark = `c${i}q`
    out = ''
    const t = performance.now()
    ws.send(new TextEncoder().encode(mark))
    await waitFor(mark)
    term.push(performance.now() - t)
    ws.send(new TextEncoder().encode('\x15'))
  }
  ws.close()
  report('keystroke echo, console terminal (WebSocket)', term)
} finally {
  await sbx.kill()
}
