// Lifecycle events and webhooks in a cluster (spec §12, issue 28): the
// nodes record the events in the shared PostgreSQL with the sandbox rows,
// and every api instance runs a deliverer that claims pending deliveries
// under a lease (FOR UPDATE SKIP LOCKED). The api instance in the middle of
// a delivery is SIGKILLed: the other one delivers it once the lease ran
// out, under the same event id, and the events API (served by any node)
// has each event once. run-cluster.sh starts the daemons with
// --webhook-allow-private (the receiver is on this host's loopback) and
// --webhook-retry-interval 1s (scripts/test.sh's cluster stage).
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { createServer } from 'node:http'
import { createHash } from 'node:crypto'
import { execFileSync } from 'node:child_process'
import { LB, API1, API2, api, tracker, via, waitUntil, killDaemon, restartDaemon, waitHealthy, pidOf, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('events')
const lc = 'sandbox.lifecycle.'
const secret = `whsec-${t.tag}`
const got = [] // {id, type, sandboxId, status, port}
let hold = true
let held = null // {id, port, release}
const server = createServer((req, res) => {
  const chunks = []
  req.on('data', (c) => chunks.push(c))
  req.on('end', () => {
    const body = Buffer.concat(chunks)
    // E2B's documented verification.
    const want = createHash('sha256').update(secret + body.toString()).digest('base64').replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')
    if (req.headers['e2b-signature'] !== want) {
      res.writeHead(401).end()
      return
    }
    const ev = JSON.parse(body)
    const d = { id: ev.id, type: ev.type, sandboxId: ev.sandboxId, port: req.socket.remotePort, status: 200 }
    if (hold && !held && ev.type === lc + 'created') {
      d.status = 503
      held = d
      got.push(d)
      return
    }
    got.push(d)
    res.writeHead(200).end()
  })
})
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
const url = `http://127.0.0.1:${server.address().port}/hook`
let webhookId = ''
let killed = ''

after(async () => {
  if (killed) {
    try { restartDaemon(killed) } catch {}
    await waitHealthy(killed === 'api1' ? API1 : API2, 60_000).catch(() => {})
  }
  if (webhookId) await api(LB, 'DELETE', `/events/webhooks/${webhookId}`).catch(() => {})
  await t.killAll()
  server.closeAllConnections()
  server.close()
})

/** The api instance whose process has the local end of a connection from port. */
function apiHolding (port) {
  const out = execFileSync('ss', ['-Htnp', 'state', 'established', `( sport = :${port} )`], { encoding: 'utf8' })
  const pid = Number(/pid=(\d+)/.exec(out)?.[1])
  for (const name of ['api1', 'api2']) if (pidOf(name) === pid) return name
  throw new Error(`no api instance holds port ${port}: ${out}`)
}

describe('webhooks in a cluster', { timeout: TEST_TIMEOUT * 2 }, () => {
  it('the api instance delivering is SIGKILLed: the other delivers, same event id, once', { timeout: TEST_TIMEOUT * 2 }, async () => {
    const r = await api(LB, 'POST', '/events/webhooks', { name: 'cluster', url, events: [lc + 'created', lc + 'killed'], signatureSecret: secret })
    assert.equal(r.status, 201, r.text)
    webhookId = r.body.id

    const sbx = await t.create({ ...via(LB), metadata: { test: 'cluster-events' } })
    assert.ok(await waitUntil(() => held, 30_000, 50), 'the created event was never delivered')
    assert.equal(held.sandboxId, sbx.sandboxId)
    killed = apiHolding(held.port)
    await killDaemon(killed)
    hold = false

    // The other instance takes the delivery over once the lease (attempt
    // timeout + 20 s) ran out.
    const redelivered = await waitUntil(() => got.find((d) => d.type === lc + 'created' && d.status === 200 && d.sandboxId === sbx.sandboxId), 90_000, 200)
    assert.ok(redelivered, `created was not redelivered: ${JSON.stringify(got)}`)
    assert.equal(redelivered.id, held.id, 'redelivered under the same event id')

    await sbx.kill()
    const killedEv = await waitUntil(() => got.find((d) => d.type === lc + 'killed' && d.sandboxId === sbx.sandboxId), 30_000, 200)
    assert.ok(killedEv, 'killed was not delivered')

    const ev = await waitUntil(async () => {
      const res = await api(LB, 'GET', `/events/sandboxes/${sbx.sandboxId}?orderAsc=true`)
      return res.status === 200 && res.body.length === 2 ? res.body : null
    }, 30_000, 250)
    assert.deepEqual(ev?.map((e) => e.type), [lc + 'created', lc + 'killed'])
    assert.equal(ev[0].id, held.id)
    const acked = got.filter((d) => d.sandboxId === sbx.sandboxId && d.status === 200)
    assert.deepEqual(acked.map((d) => d.type).sort(), [lc + 'created', lc + 'killed'], `acknowledged once each: ${JSON.stringify(acked)}`)
  })
})
