#!/usr/bin/env node
// bench/egress: the egress proxy (issue 29) through a real sandbox. A
// stand-in internet in a network namespace we own serves two HTTPS names,
// secrets-a.test (the sandbox has a network rule for it: intercepted, a
// header filled from a secret) and secrets-b.test (no rule: not
// intercepted, the "plain" baseline), from the same Node server process
// and the same certificate. In the same run, interleaved round by round:
//   - request latency: N sequential GETs of a small body on one kept-alive
//     connection, and N GETs each on a new connection (TLS handshake, and
//     for the intercepted name the proxy's two handshakes), from a Python
//     client inside the sandbox, to A and to B, and the same client on the
//     host straight to B's address (the host's own cost);
//   - throughput: a MIB MiB download with curl inside the sandbox from A
//     and from B, and on the host from B.
// Prints p50/p99 per case, the added latency (A − B), and A/B throughput.
//
// Needs root, and a daemon started as scripts/test.sh starts it: with
// --dns-upstream <ext>.12, --deny-out-except <ext>.0/27 and
// --egress-proxy-upstream-ca <dir>/ca.pem, where <dir> (BENCH_CA_DIR, else
// AIRLOCK_E2E_UPSTREAM_CA_DIR) holds ca.pem and leaf.pem/leaf.key for
// secrets-a.test and secrets-b.test (scripts/test.sh makes them).
//
// Environment: E2B_API_URL/E2B_API_KEY; BENCH_EXT_NET (else
// AIRLOCK_E2E_EXT_NET, else 10.78.255: uses <ext>.8/29, as the e2e tests,
// so not at the same time as them); BENCH_N requests per case and round
// (default 200); BENCH_ROUNDS (default 3); BENCH_MIB (default 256).
import { execFileSync, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { writeFileSync, mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { daemon, loadSDK } from '../sdk.mjs'

const { apiURL, apiKey } = daemon('egress (through a sandbox)', { trimSlash: true })
const { Sandbox } = await loadSDK('e2b')
const N = Number(process.env.BENCH_N || 200)
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3)
const MIB = Number(process.env.BENCH_MIB || 256)
const caDir = process.env.BENCH_CA_DIR || process.env.AIRLOCK_E2E_UPSTREAM_CA_DIR
if (!caDir) {
  console.error('egress bench: set BENCH_CA_DIR (or AIRLOCK_E2E_UPSTREAM_CA_DIR): the upstream CA the daemon trusts')
  process.exit(2)
}
const ext = process.env.BENCH_EXT_NET || process.env.AIRLOCK_E2E_EXT_NET || '10.78.255'
const hostIP = `${ext}.9`
const ipA = `${ext}.10`
const ipB = `${ext}.11`
const ipDNS = `${ext}.12`
const tag = randomBytes(3).toString('hex')
const ns = `bench-egress-${tag}`
const hostIf = `bneg${tag}`
const nsIf = `bneh${tag}`
const ip = (...args) => execFileSync('ip', args, { stdio: 'pipe' })

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
const median = (xs) => pct(xs, 50)

// The latency client: N GETs of /small, on one connection (keep) or a new
// one each (new), TLS not verified (the same client work in every case);
// prints the latencies in microseconds as JSON.
const latClient = `import json, socket, ssl, sys, time, http.client
host, addr, n, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ctx = ssl._create_unverified_context()
class Conn(http.client.HTTPSConnection):
    def connect(self):
        self.sock = ctx.wrap_socket(socket.create_connection((addr or host, 443), timeout=30), server_hostname=host)
def conn():
    return Conn(host, 443, timeout=30)
out = []
c = conn() if mode == "keep" else None
for i in range(n):
    t0 = time.perf_counter()
    if mode != "keep":
        c = conn()
    c.request("GET", "/small")
    r = c.getresponse(); r.read()
    if mode != "keep":
        c.close()
    out.append(int((time.perf_counter() - t0) * 1e6))
    assert r.status == 200, r.status
print(json.dumps(out))
`

const servers = `
  const fs = require('fs')
  const opts = { cert: fs.readFileSync('${caDir}/leaf.pem'), key: fs.readFileSync('${caDir}/leaf.key') }
  const chunk = Buffer.alloc(256 << 10, 120)
  const handler = (q, s) => {
    const u = new URL(q.url, 'https://x')
    if (u.pathname === '/bytes') {
      let left = Number(u.searchParams.get('n'))
      s.writeHead(200, { 'Content-Length': left, 'Content-Type': 'application/octet-stream' })
      const more = () => {
        while (left > 0) {
          const b = left >= chunk.length ? chunk : chunk.subarray(0, left)
          left -= b.length
          if (!s.write(b)) { s.once('drain', more); return }
        }
        s.end()
      }
      more()
      return
    }
    s.end(JSON.stringify({ ok: true, auth: q.headers.authorization ? 'set' : 'none' }))
  }
  // TCP connections each server accepted, printed when the bench stops it:
  // with the proxy's upstream reuse A gets far fewer than B.
  const conns = { A: 0, B: 0 }
  for (const [name, addr] of [['A', '${ipA}'], ['B', '${ipB}']]) {
    const srv = require('https').createServer(opts, handler)
    srv.on('connection', () => { conns[name]++ })
    srv.listen(443, addr)
  }
  process.on('SIGTERM', () => {
    console.log('upstream TCP connections accepted: A (intercepted, from the proxy) ' + conns.A + ', B (plain: sandbox and host) ' + conns.B)
    process.exit(0)
  })
`

let server
function setupNet () {
  ip('netns', 'add', ns)
  ip('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf)
  ip('link', 'set', nsIf, 'netns', ns)
  ip('addr', 'add', `${hostIP}/29`, 'dev', hostIf)
  ip('link', 'set', hostIf, 'up')
  for (const a of [ipA, ipB, ipDNS]) ip('-n', ns, 'addr', 'add', `${a}/29`, 'dev', nsIf)
  ip('-n', ns, 'link', 'set', nsIf, 'up')
  ip('-n', ns, 'link', 'set', 'lo', 'up')
  ip('-n', ns, 'route', 'add', 'default', 'via', hostIP)
  server = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', `${servers}
    ${dnsServer.toString()}
    dnsServer('${ipDNS}', { 'secrets-a.test': '${ipA}', 'secrets-b.test': '${ipB}' })`], { stdio: 'inherit' })
}

function teardownNet () {
  server?.kill()
  try { ip('link', 'del', hostIf) } catch {}
  try { ip('netns', 'del', ns) } catch {}
}

async function run (sbx, cmd) {
  const r = await sbx.commands.run(cmd, { timeoutMs: 600_000 })
  return r.stdout
}

const secretName = `bench-egress-${tag}`
let sbx
try {
  setupNet()
  await call('POST', '/secrets', { name: secretName, value: `bench-${tag}-${randomBytes(16).toString('hex')}` })
  const created = await call('POST', '/sandboxes', {
    templateID: 'base', timeout: 1800,
    network: { rules: { 'secrets-a.test': [{ transform: { headers: { Authorization: `Bearer \${e2b.secrets.${secretName}}` } } }] } }
  })
  sbx = await Sandbox.connect(created.sandboxID)
  await sbx.files.write('/tmp/lat.py', latClient)
  const hostDir = mkdtempSync(join(tmpdir(), 'bench-egress-'))
  writeFileSync(join(hostDir, 'lat.py'), latClient)
  // The rule is live, and A's address steered (the first lookup).
  const check = await run(sbx, 'curl -sS -m 20 https://secrets-a.test/small')
  if (!check.includes('"auth":"set"')) throw new Error(`the intercepted name did not get the header: ${check}`)
  const plainCheck = await run(sbx, 'curl -sSk -m 20 https://secrets-b.test/small')
  if (!plainCheck.includes('"auth":"none"')) throw new Error(`the plain name: ${plainCheck}`)

  const lat = { keep: { A: [], B: [], host: [] }, new: { A: [], B: [], host: [] } }
  const tput = { A: [], B: [], host: [] }
  const bytesURL = (name) => `https://${name}/bytes?n=${MIB << 20}`
  const curlW = "-sS -o /dev/null -w '%{speed_download}'"
  for (let round = 0; round < ROUNDS; round++) {
    for (const mode of ['keep', 'new']) {
      lat[mode].A.push(...JSON.parse(await run(sbx, `python3 /tmp/lat.py secrets-a.test '' ${N} ${mode}`)))
      lat[mode].B.push(...JSON.parse(await run(sbx, `python3 /tmp/lat.py secrets-b.test '' ${N} ${mode}`)))
      lat[mode].host.push(...JSON.parse(execFileSync('python3', [join(hostDir, 'lat.py'), 'secrets-b.test', ipB, String(N), mode]).toString()))
    }
    tput.A.push(Number(await run(sbx, `curl ${curlW} ${bytesURL('secrets-a.test')}`)))
    tput.B.push(Number(await run(sbx, `curl -k ${curlW} ${bytesURL('secrets-b.test')}`)))
    tput.host.push(Number(execFileSync('bash', ['-c', `curl -k ${curlW} --resolve secrets-b.test:443:${ipB} ${bytesURL('secrets-b.test')}`]).toString()))
    console.error(`round ${round + 1}/${ROUNDS} done`)
  }
  const ms = (us) => (us / 1000).toFixed(2)
  console.log(`egress bench: ${ROUNDS} rounds × ${N} requests per case, ${MIB} MiB downloads; load average ${execFileSync('cat', ['/proc/loadavg']).toString().split(' ').slice(0, 3).join(' ')}`)
  console.log('| case | keep-alive p50 | p99 | new connection p50 | p99 | download MiB/s (median) |')
  console.log('|---|---|---|---|---|---|')
  const names = { A: 'sandbox → secrets-a.test (intercepted)', B: 'sandbox → secrets-b.test (plain)', host: 'host → secrets-b.test' }
  for (const k of ['A', 'B', 'host']) {
    console.log(`| ${names[k]} | ${ms(pct(lat.keep[k], 50))} ms | ${ms(pct(lat.keep[k], 99))} ms | ${ms(pct(lat.new[k], 50))} ms | ${ms(pct(lat.new[k], 99))} ms | ${(median(tput[k]) / (1 << 20)).toFixed(0)} |`)
  }
  console.log(`| added by the proxy (A − B) | ${ms(pct(lat.keep.A, 50) - pct(lat.keep.B, 50))} ms | | ${ms(pct(lat.new.A, 50) - pct(lat.new.B, 50))} ms | | A/B ${(100 * median(tput.A) / median(tput.B)).toFixed(0)} % |`)
  console.log(`downloads per round (MiB/s): A ${tput.A.map((x) => (x / (1 << 20)).toFixed(0)).join(' ')}; B ${tput.B.map((x) => (x / (1 << 20)).toFixed(0)).join(' ')}; host ${tput.host.map((x) => (x / (1 << 20)).toFixed(0)).join(' ')}`)
} finally {
  if (sbx) await sbx.kill().catch(() => {})
  await call('DELETE', `/secrets/${secretName}`).catch(() => {})
  teardownNet()
}

// A tiny authoritative DNS server (runs in the stand-in namespace;
// stringified into its script), as test/e2e/egress.test.mjs's.
function dnsServer (addr, names) {
  const sock = require('dgram').createSocket('udp4')
  sock.on('message', (q, rinfo) => {
    if (q.length < 12) return
    let off = 12
    const labels = []
    while (off < q.length && q[off] !== 0) {
      labels.push(q.subarray(off + 1, off + 1 + q[off]).toString())
      off += q[off] + 1
    }
    const qEnd = off + 5
    if (qEnd > q.length) return
    const qtype = q.readUInt16BE(off + 1)
    const ip = names[labels.join('.').toLowerCase()]
    const answer = ip && qtype === 1
    const head = Buffer.alloc(12)
    q.copy(head, 0, 0, 2)
    head.writeUInt16BE(0x8180 | (ip ? 0 : 3), 2)
    head.writeUInt16BE(1, 4)
    head.writeUInt16BE(answer ? 1 : 0, 6)
    const parts = [head, q.subarray(12, qEnd)]
    if (answer) {
      const rr = Buffer.alloc(16)
      rr.writeUInt16BE(0xc00c, 0)
      rr.writeUInt16BE(1, 2)
      rr.writeUInt16BE(1, 4)
      rr.writeUInt32BE(60, 6)
      rr.writeUInt16BE(4, 10)
      ip.split('.').forEach((b, i) => rr.writeUInt8(Number(b), 12 + i))
      parts.push(rr)
    }
    sock.send(Buffer.concat(parts), rinfo.port, rinfo.address)
  })
  sock.bind(53, addr)
}
