// E2B's lifecycle events API (spec §12) with the official SDK driving the
// sandbox: the npm SDK (e2b 2.51) has no events client, so the events are
// read with raw fetch, as E2B's docs show. create, setTimeout, pause,
// resume (connect), kill and a timeout kill each record the right event.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'

const { Sandbox } = await import('e2b')
const { tracker, waitUntil, TEST_TIMEOUT } = await import('./helpers.mjs')

const t = tracker('events')
after(() => t.killAll())

const lc = 'sandbox.lifecycle.'

async function events (sandboxId, query = 'orderAsc=true&limit=100') {
  const res = await fetch(`${process.env.E2B_API_URL}/events/sandboxes/${sandboxId}?${query}`, {
    headers: { 'X-API-Key': process.env.E2B_API_KEY }
  })
  assert.equal(res.status, 200, await res.clone().text())
  const body = await res.json()
  assert.ok(Array.isArray(body), 'a bare array')
  return body
}

describe('lifecycle events', () => {
  it('create, setTimeout, pause, resume and kill, in order with E2B\'s shapes', { timeout: TEST_TIMEOUT }, async () => {
    const s = await t.create({ metadata: { who: 'events-js' } })
    await s.setTimeout(240_000)
    assert.equal(await s.pause(), true)
    const r = await Sandbox.connect(s.sandboxId)
    await r.kill()
    // A kill answers before its row (and its event) is written.
    const es = await waitUntil(async () => {
      const got = await events(s.sandboxId)
      return got.length >= 5 ? got : null
    }, 10_000, 50)
    assert.deepEqual(es.map((e) => e.type), ['created', 'updated', 'paused', 'resumed', 'killed'].map((x) => lc + x))
    for (const e of es) {
      assert.equal(e.version, 'v1')
      assert.equal(e.sandboxId, s.sandboxId)
      assert.match(e.id, /^[0-9a-f-]{36}$/)
      assert.match(e.sandboxTeamId, /^[0-9a-f-]{36}$/)
      assert.ok(!Number.isNaN(Date.parse(e.timestamp)))
      assert.equal(e.eventData.sandbox_metadata.who, 'events-js')
    }
    for (const i of [2, 4]) {
      const x = es[i].eventData.execution
      assert.ok(x, `${es[i].type} carries execution`)
      assert.deepEqual(Object.keys(x).sort(), ['execution_time', 'memory_mb', 'started_at', 'vcpu_count'])
    }
    assert.ok(Date.parse(es[1].eventData.set_timeout) > Date.now() + 200_000)
    assert.notEqual(es[3].sandboxExecutionId, es[0].sandboxExecutionId, 'a resume is a new execution')
    const newest = await events(s.sandboxId, 'limit=1')
    assert.equal(newest[0].type, lc + 'killed')
    const typed = await events(s.sandboxId, `types=${lc}paused&types=${lc}resumed&orderAsc=true`)
    assert.deepEqual(typed.map((e) => e.type), [lc + 'paused', lc + 'resumed'])
  })

  it('a timeout kill records killed', { timeout: TEST_TIMEOUT }, async () => {
    const s = await t.create({ timeoutMs: 2_000 })
    const es = await waitUntil(async () => {
      const got = await events(s.sandboxId)
      return got.length === 2 ? got : null
    }, 60_000, 500)
    assert.deepEqual(es?.map((e) => e.type), [lc + 'created', lc + 'killed'])
  })

  it('bad parameters are 400, an unknown sandbox 404', async () => {
    for (const q of ['limit=0', 'limit=101', 'types=sandbox.lifecycle.nope']) {
      const res = await fetch(`${process.env.E2B_API_URL}/events/sandboxes?${q}`, { headers: { 'X-API-Key': process.env.E2B_API_KEY } })
      assert.equal(res.status, 400, q)
    }
    const res = await fetch(`${process.env.E2B_API_URL}/events/sandboxes/nosuchsandbox0000`, { headers: { 'X-API-Key': process.env.E2B_API_KEY } })
    assert.equal(res.status, 404)
  })
})
