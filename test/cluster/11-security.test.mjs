// Attacks on the api → node hop and on the api tier's unauthenticated paths
// (issue 23's security review: M1, M3, L7). Each test would pass on the old
// protocol (plain HTTP with a static secret; a scan of every token per
// signed URL; no limit) and must be refused now.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import {
  LB, API1, API2, NODE_IDS, api, nodes, nodeURL, nodeFetch, clusterTLS, asAPITier, tracker, waitUntil, uniq, sleep,
  ARTIFACTS, TEST_TIMEOUT
} from './helpers.mjs'

const t = tracker('security')
after(() => t.killAll())

/** The cluster secret as the node's own start command names it (cmd/<id>). */
function secretOf (id) {
  const cmd = readFileSync(`${process.env.AIRLOCK_CLUSTER_CMDS}/${id}`, 'utf8')
  const m = cmd.match(/--cluster-secret-file '?([^' \n]+)'?/)
  assert.ok(m, `cmd/${id} names no --cluster-secret-file:\n${cmd}`)
  return readFileSync(m[1], 'utf8').trim()
}

/**
 * A plain-HTTP request, as the api tier sent them before issue 23:
 * {status, text}, or {status: 0, error} when the connection failed (a TLS
 * listener answers 400 "Client sent an HTTP request to an HTTPS server"
 * and closes, which may reset the connection before the answer is read).
 */
function plainHTTP (url, { method = 'GET', headers = {}, body } = {}) {
  return new Promise((resolve) => {
    const req = http.request(url, { method, headers, agent: false, timeout: 10_000 }, (res) => {
      const chunks = []
      res.on('data', (c) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode, text: Buffer.concat(chunks).toString() }))
      res.on('error', (err) => resolve({ status: 0, text: '', error: `${err.code} ${err.message}` }))
    })
    req.on('timeout', () => req.destroy(new Error('no answer in 10 s')))
    req.on('error', (err) => resolve({ status: 0, text: '', error: `${err.code} ${err.message}` }))
    if (body !== undefined) req.write(body)
    req.end()
  })
}

/** Asserts that a replayed plain-HTTP request was refused: 400, or the connection reset. */
function assertRefused (r, what) {
  assert.ok(r.status === 400 || (r.status === 0 && /ECONNRESET|socket hang up|EPIPE/.test(r.error)),
    `${what}: ${r.status} ${r.error ?? ''} ${r.text}`)
  if (r.status === 400) assert.match(r.text, /HTTP request to an HTTPS server/, what)
}

/** SQL on the cluster's database (psql, as run-cluster.sh set it up). */
function sql (q) {
  return execFileSync('/usr/lib/postgresql/15/bin/psql', [process.env.AIRLOCK_CLUSTER_PG_URL, '-tAqc', q], { encoding: 'utf8' }).trim()
}

/** {status: count} of a list of statuses. */
function tally (codes) {
  const out = {}
  for (const c of codes) out[c] = (out[c] ?? 0) + 1
  return out
}

async function sandboxCount (id) {
  return (await nodes(LB)).find((n) => n.id === id)?.sandboxes
}

describe('M1: the api → node hop is mutual TLS with per-node identities', { timeout: TEST_TIMEOUT * 4 }, () => {
  const [victim, other] = NODE_IDS
  let s
  before(async () => {
    s = await t.createOn(victim)
  })

  it('M1: a request replayed in the old protocol (plain HTTP, the cluster secret and the api tier\'s mark) is refused', { timeout: TEST_TIMEOUT }, async () => {
    const headers = { 'X-Airlock-Cluster-Secret': secretOf(victim), 'X-Airlock-Authenticated': 'api-key', 'Content-Type': 'application/json' }
    const url = nodeURL(victim).replace(/^https:/, 'http:')
    const before = await sandboxCount(victim)
    const list = await plainHTTP(`${url}/sandboxes`, { headers })
    assertRefused(list, 'replayed GET /sandboxes')
    assert.ok(!list.text.includes(s.id), `the replayed list shows ${s.id}: ${list.text}`)
    assertRefused(await plainHTTP(`${url}/v2/sandboxes`, { method: 'POST', headers, body: JSON.stringify({ templateID: 'base', metadata: t.metadata }) }),
      'replayed POST /v2/sandboxes')
    assertRefused(await plainHTTP(`${url}/sandboxes/${s.id}`, { method: 'DELETE', headers }), 'replayed DELETE')
    assertRefused(await plainHTTP(`${url}/airlock/v1/internal/evacuate`, { method: 'POST', headers: { ...headers, 'X-Airlock-Internal': '1' } }),
      'replayed evacuate')
    // Nothing changed: the sandbox runs, no new one.
    const r = await api(LB, 'GET', `/sandboxes/${s.id}`)
    assert.equal(r.status, 200, `${s.id} after the replays: ${r.status} ${r.text}`)
    assert.equal(r.body.state, 'running')
    assert.equal(await sandboxCount(victim), before, `${victim}'s sandbox count changed`)
  })

  it('M1: a TLS client without a certificate is refused, even with the cluster secret (only /health answers)', { timeout: TEST_TIMEOUT }, async () => {
    const url = nodeURL(victim)
    const health = await nodeFetch(`${url}/health`, { tls: clusterTLS(null) })
    assert.equal(health.status, 200, `/health without a certificate: ${health.status}`)
    for (const [method, path, extra] of [['GET', '/sandboxes', {}], ['GET', `/sandboxes/${s.id}`, {}], ['DELETE', `/sandboxes/${s.id}`, {}],
      ['POST', '/airlock/v1/internal/evacuate', { 'X-Airlock-Internal': '1' }]]) {
      const r = await nodeFetch(url + path, { method, headers: { ...asAPITier(), ...extra }, tls: clusterTLS(null) })
      assert.equal(r.status, 401, `${method} ${path} without a client certificate: ${r.status} ${await r.text()}`)
      assert.match(await r.text(), /client certificate/)
    }
    assert.equal((await api(LB, 'GET', `/sandboxes/${s.id}`)).status, 200, `${s.id} is gone`)
  })

  it(`M1: a node's certificate is refused by another node (${other} cannot call ${victim} as the api tier)`, { timeout: TEST_TIMEOUT }, async () => {
    for (const [method, path, extra] of [['GET', '/sandboxes', {}], ['DELETE', `/sandboxes/${s.id}`, {}],
      ['POST', '/airlock/v1/internal/evacuate', { 'X-Airlock-Internal': '1' }]]) {
      await assert.rejects(nodeFetch(nodeURL(victim) + path, { method, headers: { ...asAPITier(), ...extra }, tls: clusterTLS(other) }),
        (err) => /certificate|handshake|socket hang up|ECONNRESET|EPIPE/i.test(`${err.code} ${err.message}`),
        `${method} ${path} with ${other}'s certificate was not refused at the handshake`)
    }
    // The api tier's certificate works (the control).
    const ok = await nodeFetch(`${nodeURL(victim)}/sandboxes/${s.id}`, { headers: asAPITier() })
    assert.equal(ok.status, 200, `with the api tier's certificate: ${ok.status}`)
  })

  it('M1: the api tier refuses a node whose certificate names another node (a row pointing at another node\'s address)', { timeout: TEST_TIMEOUT * 2 }, async () => {
    // A registration that claims to be node "impostor" at the victim's
    // address: the api tier dials it and finds the victim's certificate.
    const id = `impostor${uniq()}`
    const addr = nodeURL(victim).replace(/^https:\/\//, '')
    sql(`INSERT INTO nodes (id, addr, state, runtime, gen, started_at, heartbeat_at) VALUES ('${id}', '${addr}', 'live', 'gvisor', 1, now(), now())`)
    try {
      const seen = await waitUntil(async () => (await nodes(API1)).some((n) => n.id === id) && (await nodes(API2)).some((n) => n.id === id), 10_000, 250)
      assert.ok(seen, `the api tier does not list ${id}`)
      // Lists fan out to every node the registry knows (read every
      // second): the impostor is left out, named.
      for (const base of [API1, API2]) {
        let r
        await waitUntil(async () => {
          r = await api(base, 'GET', `/v2/sandboxes?metadata=${encodeURIComponent(`cluster-suite=${t.tag}`)}`)
          return (r.headers.get('x-airlock-partial') ?? '').split(',').includes(id)
        }, 10_000, 250)
        assert.equal(r.status, 200, r.text)
        assert.ok((r.headers.get('x-airlock-partial') ?? '').split(',').includes(id), `X-Airlock-Partial through ${base}: ${r.headers.get('x-airlock-partial')}`)
        assert.deepEqual(r.body.map((x) => x.sandboxID), [s.id], 'the victim\'s sandbox is listed once, from the victim')
      }
      // A drain of the impostor would evacuate whatever answers at its
      // address: refused at the handshake, the victim keeps its sandboxes.
      if (ARTIFACTS) {
        const before = await sandboxCount(victim)
        const d = await api(API1, 'POST', `/airlock/v1/nodes/${id}/drain`, undefined, 120_000)
        assert.equal(d.status, 200, d.text)
        assert.equal(d.body.moved.length, 0, `moved: ${d.text}`)
        assert.match(JSON.stringify(d.body.failed), new RegExp(`airlock:node:${victim}.*want airlock:node:${id}`), d.text)
        const r = await api(LB, 'GET', `/sandboxes/${s.id}`)
        assert.equal(r.status, 200, r.text)
        assert.equal(r.body.state, 'running', `${s.id} after the impostor's drain: ${r.text}`)
        assert.equal(r.node, victim)
        assert.equal(await sandboxCount(victim), before)
      }
    } finally {
      sql(`DELETE FROM nodes WHERE id = '${id}'`)
    }
  })
})

describe('M3 and L7: what unauthenticated requests make the api tier do', { timeout: TEST_TIMEOUT * 2 }, () => {
  it('M3: a malformed /files signature is refused (400) before any token lookup', { timeout: TEST_TIMEOUT }, async () => {
    for (const base of [LB, API1, API2]) {
      for (const method of ['GET', 'POST']) {
        for (const sig of ['x', 'v1_short', `v1_${'A'.repeat(43)}!`]) {
          const res = await fetch(`${base}/files?path=/etc/passwd&signature=${encodeURIComponent(sig)}`, { method, signal: AbortSignal.timeout(10_000) })
          const text = await res.text()
          assert.equal(res.status, 400, `${method} ${base}/files?signature=${sig}: ${res.status} ${text}`)
          assert.match(JSON.parse(text).message, /invalid signature: want "v1_" and 43 base64 characters/)
        }
      }
    }
    // A well-formed wrong one is a 401, as before.
    const res = await fetch(`${API1}/files?path=/x&signature=v1_${'A'.repeat(43)}`, { signal: AbortSignal.timeout(10_000) })
    assert.equal(res.status, 401, await res.text())
  })

  it('L7: made-up sandbox ids without an API key are rate-limited per client (429), a routed sandbox is not', { timeout: TEST_TIMEOUT }, async () => {
    const s = await t.createRaw(API2)
    // Route it once (cached from then on).
    const first = await fetch(`${API2}/health`, { headers: { 'E2b-Sandbox-Id': s.id } })
    await first.text()
    // Past the burst (200), 50 a second: 400 made-up ids at once.
    const codes = await Promise.all(Array.from({ length: 400 }, async (_, i) => {
      const res = await fetch(`${API2}/health`, { headers: { 'E2b-Sandbox-Id': `madeup${uniq()}${i}` }, signal: AbortSignal.timeout(30_000) })
      await res.text()
      return res.status
    }))
    const limited = codes.filter((c) => c === 429).length
    assert.ok(limited > 0, `400 made-up ids: no 429 (${JSON.stringify(tally(codes))})`)
    assert.ok(codes.every((c) => c === 429 || c === 502), `answers: ${JSON.stringify(tally(codes))}`)
    // The routed sandbox's traffic still passes, and the API key is never limited.
    const ok = await fetch(`${API2}/health`, { headers: { 'E2b-Sandbox-Id': s.id } })
    await ok.text()
    assert.notEqual(ok.status, 429, 'traffic to a routed sandbox was limited')
    const keyed = await api(API2, 'GET', `/sandboxes/${s.id}`)
    assert.equal(keyed.status, 200, keyed.text)
    await sleep(5_000) // the bucket refills for whatever runs next
  })
})
