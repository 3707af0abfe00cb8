#!/usr/bin/env node
// Benchmarks live egress policy changes (PUT /sandboxes/{id}/network) on a
// running Airlock daemon and prints p50/p99 next to a baseline measured in
// the same run: POST /sandboxes/{id}/timeout, a control-plane call that does
// no nftables work. Policies use documentation ranges; no traffic is sent.
//
// Environment: E2B_API_URL/E2B_API_KEY (or AIRLOCK_URL/AIRLOCK_API_KEY);
// BENCH_N iterations per case (default 100).
import { daemon } from './sdk.mjs'

const { apiURL, apiKey } = daemon('egress', { exportEnv: false, trimSlash: true })
const N = Number(process.env.BENCH_N || 100)

async function call (method, path, body) {
  const res = await fetch(apiURL + path, {
    method,
    headers: { 'X-API-Key': apiKey, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body)
  })
  const text = await res.text()
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text}`)
  return text ? JSON.parse(text) : undefined
}

function pct (xs, p) {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]
}

async function measure (fn) {
  const ms = []
  for (let i = 0; i < N; i++) {
    const t0 = performance.now()
    await fn(i)
    ms.push(performance.now() - t0)
  }
  return ms
}

const cidrs = (n) => Array.from({ length: n }, (_, i) => `198.51.${Math.floor(i / 4)}.${(i % 4) * 64}/26`)

const sbx = await call('POST', '/v2/sandboxes', { templateID: 'base', timeout: 300 })
const id = sbx.sandboxID
try {
  const rows = []
  rows.push(['baseline: POST /timeout', await measure(() => call('POST', `/sandboxes/${id}/timeout`, { timeout: 300 }))])
  rows.push(['PUT /network, 2 entries', await measure((i) => call('PUT', `/sandboxes/${id}/network`,
    i % 2 ? { allowOut: ['192.0.2.7'], denyOut: ['0.0.0.0/0'] } : { denyOut: ['192.0.2.0/24', '203.0.113.9'] }))])
  rows.push(['PUT /network, 64 entries', await measure((i) => call('PUT', `/sandboxes/${id}/network`,
    { allowOut: cidrs(32), denyOut: i % 2 ? ['0.0.0.0/0', ...cidrs(31)] : cidrs(32) }))])
  rows.push(['PUT /network {} (clear)', await measure(() => call('PUT', `/sandboxes/${id}/network`, {}))])
  console.log(`egress policy changes, n=${N} each`)
  console.log('case'.padEnd(28), 'p50 ms'.padStart(8), 'p99 ms'.padStart(8))
  for (const [name, ms] of rows) {
    console.log(name.padEnd(28), pct(ms, 50).toFixed(2).padStart(8), pct(ms, 99).toFixed(2).padStart(8))
  }
} finally {
  await call('DELETE', `/sandboxes/${id}`).catch(() => {})
}
