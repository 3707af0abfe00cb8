// Per-step times of a create, a pause and a resume, read from the daemon's
// /metrics (airlock_sandbox_step_seconds{op,kind,step}; the step names are in
// internal/sandbox/doc.go, "Forward steps").
//
//   E2B_API_URL=http://127.0.0.1:PORT E2B_API_KEY=… node bench/steps.mjs
//
// STEPS_CREATES (20) sequential creates of STEPS_TEMPLATE (code-interpreter-v1;
// run the daemon with --warm-pool code-interpreter-v1=0 so that each restores
// the boot snapshot), each killed after it answered; then STEPS_CYCLES (10)
// pause → resume cycles of one sandbox of that template. /metrics is read
// before and after each phase; each row is the phase's delta: the count,
// p50 and p99 estimated from the histogram's buckets (×1.6 apart, linear
// within a bucket, as Prometheus' histogram_quantile) and the exact mean.
// Same-run baselines: the create's own total (airlock_sandbox_create_duration_seconds)
// and the wall time the client saw (exact p50/p99).
const API = process.env.E2B_API_URL
const KEY = process.env.E2B_API_KEY
if (!API || !KEY) throw new Error('E2B_API_URL and E2B_API_KEY must be set')
const TEMPLATE = process.env.STEPS_TEMPLATE || 'code-interpreter-v1'
const CREATES = Number(process.env.STEPS_CREATES || 20)
const CYCLES = Number(process.env.STEPS_CYCLES || 10)

async function api (method, path, body) {
  const res = await fetch(API + path, {
    method,
    headers: { 'X-API-KEY': KEY, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined
  })
  const text = await res.text()
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text}`)
  return text ? JSON.parse(text) : null
}

async function scrape () {
  const res = await fetch(API + '/metrics', { headers: { 'X-API-KEY': KEY } })
  const out = new Map()
  for (const line of (await res.text()).split('\n')) {
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/)
    if (m) out.set(m[1] + (m[2] || ''), Number(m[3]))
  }
  return out
}

// histograms returns name{labels without le} → {buckets: [[le, cumulative]], sum, count}
// for the delta after - before of the histogram family name.
function histograms (before, after, name) {
  const hs = new Map()
  const get = (k) => {
    if (!hs.has(k)) hs.set(k, { buckets: [], sum: 0, count: 0 })
    return hs.get(k)
  }
  for (const [k, v] of after) {
    const d = v - (before.get(k) || 0)
    if (k.startsWith(name + '_bucket')) {
      const le = k.match(/le="([^"]+)"/)[1]
      const labels = k.slice((name + '_bucket').length).replace(/,?le="[^"]+"/, '').replace('{,', '{').replace('{}', '')
      get(labels).buckets.push([le === '+Inf' ? Infinity : Number(le), d])
    } else if (k.startsWith(name + '_sum')) {
      get(k.slice((name + '_sum').length)).sum = d
    } else if (k.startsWith(name + '_count')) {
      get(k.slice((name + '_count').length)).count = d
    }
  }
  for (const h of hs.values()) h.buckets.sort((a, b) => a[0] - b[0])
  return hs
}

function quantile (h, q) {
  if (h.count === 0) return NaN
  const rank = q * h.count
  let lower = 0
  let prev = 0
  for (const [le, c] of h.buckets) {
    if (c >= rank) {
      if (le === Infinity) return lower
      return lower + (le - lower) * ((rank - prev) / Math.max(c - prev, 1e-9))
    }
    lower = le
    prev = c
  }
  return lower
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]
}
const ms = (s) => (s * 1000).toFixed(s < 0.01 ? 2 : 1)

function rows (before, after, ops, order) {
  const hs = histograms(before, after, 'airlock_sandbox_step_seconds')
  const out = []
  for (const [labels, h] of hs) {
    if (h.count === 0) continue
    const op = labels.match(/op="([^"]+)"/)[1]
    if (!ops.includes(op)) continue
    const kind = labels.match(/kind="([^"]+)"/)[1]
    const step = labels.match(/step="([^"]+)"/)[1]
    out.push({ op, kind, step, h })
  }
  const idx = (r) => { const i = order.indexOf(r.step); return i < 0 ? 99 : i }
  out.sort((a, b) => a.op.localeCompare(b.op) || a.kind.localeCompare(b.kind) || idx(a) - idx(b))
  let total = 0
  for (const r of out) {
    total += r.h.sum / r.h.count
    console.log(`| ${r.op} | ${r.kind} | ${r.step} | ${r.h.count} | ${ms(quantile(r.h, 0.5))} | ${ms(quantile(r.h, 0.99))} | ${ms(r.h.sum / r.h.count)} |`)
  }
  return total
}

const ORDER = ['claim', 'readdress', 'network', 'clone', 'start', 'space', 'clear', 'freeze', 'checkpoint', 'restore', 'wake', 'wait', 'init', 'register', 'commit']
console.log(`template ${TEMPLATE}, ${CREATES} creates, ${CYCLES} pause/resume cycles; ms`)
console.log('| op | kind | step | n | p50 | p99 | mean |')
console.log('|---|---|---|---|---|---|---|')

let before = await scrape()
const wall = []
for (let i = 0; i < CREATES; i++) {
  const t0 = performance.now()
  const sb = await api('POST', '/sandboxes', { templateID: TEMPLATE, timeout: 120 })
  wall.push((performance.now() - t0) / 1000)
  await api('DELETE', '/sandboxes/' + sb.sandboxID)
}
let after = await scrape()
const stepMeans = rows(before, after, ['create'], ORDER)
const total = histograms(before, after, 'airlock_sandbox_create_duration_seconds').get('') || { count: 0, sum: 0, buckets: [] }
console.log(`| create | (sum of step means) | | | | | ${ms(stepMeans)} |`)
console.log(`| create | (total: airlock_sandbox_create_duration_seconds) | | ${total.count} | ${ms(quantile(total, 0.5))} | ${ms(quantile(total, 0.99))} | ${ms(total.sum / total.count)} |`)
console.log(`| create | (client wall, exact) | | ${wall.length} | ${ms(pct(wall, 50))} | ${ms(pct(wall, 99))} | ${ms(wall.reduce((a, b) => a + b, 0) / wall.length)} |`)

const sb = await api('POST', '/sandboxes', { templateID: TEMPLATE, timeout: 600 })
const pw = []
const rw = []
try {
  before = await scrape()
  for (let i = 0; i < CYCLES; i++) {
    let t0 = performance.now()
    await api('POST', `/sandboxes/${sb.sandboxID}/pause`)
    pw.push((performance.now() - t0) / 1000)
    t0 = performance.now()
    await api('POST', `/sandboxes/${sb.sandboxID}/resume`, { timeout: 600 })
    rw.push((performance.now() - t0) / 1000)
  }
  after = await scrape()
} finally {
  await api('DELETE', '/sandboxes/' + sb.sandboxID).catch(() => {})
}
rows(before, after, ['pause', 'resume'], ORDER)
console.log(`| pause | (client wall, exact) | | ${pw.length} | ${ms(pct(pw, 50))} | ${ms(pct(pw, 99))} | ${ms(pw.reduce((a, b) => a + b, 0) / pw.length)} |`)
console.log(`| resume | (client wall, exact) | | ${rw.length} | ${ms(pct(rw, 50))} | ${ms(pct(rw, 99))} | ${ms(rw.reduce((a, b) => a + b, 0) / rw.length)} |`)
