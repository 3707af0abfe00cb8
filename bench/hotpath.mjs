#!/usr/bin/env node
// The hot paths' last milliseconds (issue 24): runCode("1+1"),
// commands.run("true") and create → first runCode result, each next to its
// floor measured in the same sandbox and the same run:
//   - the kernel's own time for each measured runCode cell, timed in the
//     kernel: the fast channel's handle() and IPython's run_cell in it (the
//     runCode row's floor), and a Python process inside the sandbox
//     executing the same cell directly (a bare InteractiveShell's run_cell);
//   - a bare `true` fork+exec inside the sandbox;
//   - the same /execute request sent from inside the sandbox (no daemon hop),
//     and a GET /health through the daemon's proxy (the hop alone).
// Prints p50/p99 per row and the ratio to its floor.
//
// Environment: E2B_API_URL/E2B_API_KEY (or AIRLOCK_URL/AIRLOCK_API_KEY).
// BENCH_N (default 100) round trips per row; BENCH_N_CREATE (default 20)
// creates (the daemon's warm pool serves them when it has one:
// --warm-pool code-interpreter-v1=N), BENCH_CREATE_GAP_MS (default 4000)
// apart so that the pool has refilled.
import { daemon, loadSDK } from './sdk.mjs'

const { apiURL } = daemon('hotpath')
const { Sandbox } = await loadSDK('@e2b/code-interpreter')
const N = Number(process.env.BENCH_N || 100)
const NC = Number(process.env.BENCH_N_CREATE || 20)

function pct (xs, p) {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]
}
async function measure (n, fn) {
  const out = []
  for (let i = 0; i < n; i++) {
    const t = performance.now()
    await fn(i)
    out.push(performance.now() - t)
  }
  return out
}
const rows = []
function row (name, xs, floor) {
  const r = { name, n: xs.length, p50: pct(xs, 50), p99: pct(xs, 99), floor }
  rows.push(r)
  console.error(`  ${name}: p50 ${r.p50.toFixed(2)} ms p99 ${r.p99.toFixed(2)} ms (n=${xs.length})`)
  return r
}

// inSandbox runs a Python timing script inside the sandbox; it prints one
// duration in ms per line.
async function inSandbox (sbx, script) {
  await sbx.files.write('/tmp/hotpath-floor.py', script)
  const envs = sbx.envdAccessToken ? { TOKEN: sbx.envdAccessToken } : {}
  const r = await sbx.commands.run('python3 /tmp/hotpath-floor.py', { timeoutMs: 120_000, envs })
  return r.stdout.trim().split('\n').map(Number)
}

const floorCell = `
import io, sys, time
from IPython.core.interactiveshell import InteractiveShell
sh = InteractiveShell.instance()
out, sys.stdout = sys.stdout, io.StringIO()  # the Out[n] prompt goes nowhere
sh.run_cell("1+1", store_history=True)
for _ in range(${N}):
    t = time.perf_counter(); sh.run_cell("1+1", store_history=True); out.write("%f\\n" % ((time.perf_counter() - t) * 1000))
    sys.stdout.seek(0); sys.stdout.truncate()
`
const floorSpawn = (argv) => `
import os, time
argv = ${JSON.stringify(argv)}
for _ in range(${N}):
    t = time.perf_counter(); pid = os.posix_spawn(argv[0], argv, dict(os.environ)); os.waitpid(pid, 0); print((time.perf_counter() - t) * 1000)
`
// envd's process.Start (Connect, JSON) from inside the sandbox, as the SDK
// calls it for commands.run("true"): /bin/bash -l -c true as the default user.
const directStart = `
import base64, http.client, json, os, struct, time
h = {"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1",
     "Authorization": "Basic " + base64.b64encode(b"user:").decode()}
if os.environ.get("TOKEN"): h["X-Access-Token"] = os.environ["TOKEN"]
msg = json.dumps({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "true"]}}).encode()
body = struct.pack(">BI", 0, len(msg)) + msg
c = http.client.HTTPConnection("127.0.0.1", 49983)
def once():
    c.request("POST", "/process.Process/Start", body, h)
    r = c.getresponse(); out = r.read()
    assert b'"end"' in out, out
once()
for _ in range(${N}):
    t = time.perf_counter(); once(); print((time.perf_counter() - t) * 1000)
`
// gapMs: idle time between requests. Back to back (0) the sandbox's threads
// never sleep; with a gap each request first wakes them, as every request
// of an SDK client does (the client's own work between calls, or a user).
const directExecute = (gapMs = 0) => `
import http.client, json, os, time
hdr = {"Content-Type": "application/json"}
if os.environ.get("TOKEN"): hdr["X-Access-Token"] = os.environ["TOKEN"]
c = http.client.HTTPConnection("127.0.0.1", 49999)
body = json.dumps({"code": "1+1"})
def once():
    c.request("POST", "/execute", body, hdr)
    r = c.getresponse(); out = r.read()
    assert b'"text":"2"' in out, out
once()
for _ in range(${N}):
    time.sleep(${gapMs / 1000})
    t = time.perf_counter(); once(); print((time.perf_counter() - t) * 1000)
`

const kernelTimersOn = `
import gc as _gc, time as _time
_hp_ch = next(o for o in _gc.get_objects() if type(o).__name__ == "_Channel")
_hp_t = {"handle": [], "run_cell": []}
def _hp_wrap(f, k):
    def w(*a, **kw):
        t = _time.perf_counter()
        try:
            return f(*a, **kw)
        finally:
            _hp_t[k].append((_time.perf_counter() - t) * 1000)
    return w
_hp_ch.handle = _hp_wrap(_hp_ch.handle, "handle")
get_ipython().run_cell = _hp_wrap(get_ipython().run_cell, "run_cell")
`
const kernelTimersOff = `
del _hp_ch.handle, get_ipython().run_cell
import json as _json
# the N measured cells only: the cell that installed the wrappers and this one are not timed (still running)
print(_json.dumps({"handle": _hp_t["handle"], "run_cell": _hp_t["run_cell"]}))
`

const live = new Set()
try {
  const sbx = await Sandbox.create({ timeoutMs: 600_000 })
  live.add(sbx)
  await sbx.runCode('1+1')
  await sbx.commands.run('true')

  // Time the kernel's own part of each of those cells, in the kernel: the
  // fast channel's handle() (run_cell, the patches, the records' pipe
  // writes) and IPython's run_cell inside it. The wrappers cost two
  // perf_counter() calls each; they are removed after the row.
  await sbx.runCode(kernelTimersOn)
  const rc = row('runCode("1+1") via the daemon', await measure(N, async () => {
    const ex = await sbx.runCode('1+1')
    if (ex.text !== '2') throw new Error(`1+1 gave ${ex.text} ${JSON.stringify(ex.error)}`)
  }))
  const kt = await sbx.runCode(kernelTimersOff)
  const kernel = JSON.parse(kt.logs.stdout.join('') || '{"handle":[],"run_cell":[]}')
  const de = row('  POST /execute 1+1 from inside the sandbox (no daemon hop), back to back', await inSandbox(sbx, directExecute(0)))
  const dg = row('  POST /execute 1+1 from inside the sandbox (no daemon hop), 20 ms apart', await inSandbox(sbx, directExecute(20)))
  const fc = row('  floor: IPython run_cell("1+1") in a Python process in the sandbox', await inSandbox(sbx, floorCell))
  de.floor = fc
  dg.floor = fc
  if (kernel.handle.length > 0) {
    row('  the kernel: the fast channel\'s handle() of those cells, timed in the kernel', kernel.handle)
    rc.floor = row('  floor: run_cell("1+1") of those cells, timed in the kernel', kernel.run_cell)
  } else {
    console.error('  (no cell went through the fast channel: no in-kernel rows)')
    rc.floor = fc
  }

  const ct = row('commands.run("true") via the daemon', await measure(N, async () => {
    const r = await sbx.commands.run('true')
    if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`)
  }))
  row('  envd process.Start "bash -l -c true" from inside the sandbox (no daemon hop)', await inSandbox(sbx, directStart))
  row('  floor: posix_spawn("/bin/bash -l -c true") + wait in the sandbox (what the SDK runs)', await inSandbox(sbx, floorSpawn(['/bin/bash', '-l', '-c', 'true'])))
  const ft = row('  floor: posix_spawn("/bin/true") + wait in the sandbox', await inSandbox(sbx, floorSpawn(['/bin/true'])))
  ct.floor = ft
  const hopURL = process.env.E2B_SANDBOX_URL || apiURL
  row('  the hop with a body: POST /execute answered 400 by the agent (invalid JSON, no kernel) through the daemon', await measure(N, async () => {
    const r = await fetch(`${hopURL}/execute`, {
      method: 'POST',
      body: '{"code":',
      headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999', 'Content-Type': 'application/json', ...(sbx.envdAccessToken ? { 'X-Access-Token': sbx.envdAccessToken } : {}) }
    })
    await r.arrayBuffer()
    if (r.status !== 400) throw new Error(`invalid /execute: ${r.status}`)
  }))
  row('  the hop: GET /health of envd through the daemon proxy', await measure(N, async () => {
    const r = await fetch(`${process.env.E2B_SANDBOX_URL || apiURL}/health`, {
      headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' }
    })
    await r.arrayBuffer()
    if (r.status !== 200 && r.status !== 204) throw new Error(`envd /health: ${r.status}`)
  }))

  const cf = []
  const cOnly = []
  const first = []
  const second = []
  for (let i = 0; i < NC; i++) {
    // Let the warm pool refill before each create (a refill takes ~2 s
    // here; a create that finds the pool empty waits for it).
    await new Promise((resolve) => setTimeout(resolve, Number(process.env.BENCH_CREATE_GAP_MS || 4000)))
    const t = performance.now()
    const s = await Sandbox.create({ timeoutMs: 120_000 })
    const t1 = performance.now()
    const ex = await s.runCode('1+1')
    const t2 = performance.now()
    cf.push(t2 - t)
    cOnly.push(t1 - t)
    first.push(t2 - t1)
    if (ex.text !== '2') throw new Error(`1+1 gave ${ex.text}`)
    const t3 = performance.now()
    await s.runCode('1+1')
    second.push(performance.now() - t3)
    await s.kill()
  }
  row('Sandbox.create() → first runCode("1+1") result', cf)
  row('  of which Sandbox.create()', cOnly)
  const fr = row('  of which the first runCode("1+1")', first)
  fr.floor = row('  floor: the second runCode("1+1") in the same sandbox', second)
} finally {
  await Promise.allSettled([...live].map((s) => s.kill()))
}

const fmt = (ms) => `${ms.toFixed(2)} ms`
const header = ['measurement', 'n', 'p50', 'p99', 'p50 / floor']
const table = [header, ...rows.map((r) => [r.name, String(r.n), fmt(r.p50), fmt(r.p99), r.floor ? `${(r.p50 / r.floor.p50).toFixed(1)}x` : ''])]
const widths = header.map((_, i) => Math.max(...table.map((t) => t[i].length)))
const line = (cells) => cells.map((c, i) => (i >= 1 && i <= 3 ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join('  ').trimEnd()
console.log('\nHot paths (issue 24)')
console.log(line(table[0]))
console.log(line(widths.map((w) => '-'.repeat(w))))
for (const t of table.slice(1)) console.log(line(t))
console.log('Goals: runCode("1+1") p50 <= 5 ms; commands.run("true") p50 <= 10 ms; create -> first result p50 <= 60 ms, p99 <= 200 ms.')
