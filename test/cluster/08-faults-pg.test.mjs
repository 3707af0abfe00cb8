// Fault: PostgreSQL restarted (pg_ctl restart -m fast, which disconnects
// every client). The api tier and the nodes reconnect by themselves: both
// api instances are healthy again, every node heartbeats again without
// having been taken for lost, and a sandbox created before the restart still
// runs commands, through either instance.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { LB, API1, API2, NODE_IDS, api, nodes, tracker, via, waitUntil, restartPostgres, logTail, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('faults-pg')
after(() => t.killAll())

describe('PostgreSQL restarted', { timeout: TEST_TIMEOUT * 2 }, () => {
  it('the api tier and the nodes reconnect; a sandbox from before still runs commands; nothing is lost', { timeout: TEST_TIMEOUT }, async () => {
    const old = await t.createRaw(LB)
    const sbx = await Sandbox.connect(old.id, via(LB))
    await sbx.files.write('/home/user/before.txt', 'before the restart\n')
    const bg = await sbx.commands.run('sleep 600', { background: true })

    const restartedAt = Date.now()
    restartPostgres()

    // Both instances serve again, and see 3 nodes heartbeating.
    let last
    const back = await waitUntil(async () => {
      last = {}
      for (const [name, base] of [['api1', API1], ['api2', API2]]) {
        const h = await fetch(base + '/health', { signal: AbortSignal.timeout(2_000) })
        if (h.status !== 200) { last[name] = `health ${h.status}`; return false }
        const ns = await nodes(base)
        last[name] = ns.map((n) => [n.id, n.state, n.heartbeatAgeMs])
        if (!(ns.length === 3 && ns.every((n) => n.state === 'live' && n.heartbeatAgeMs < 5_000))) return false
      }
      return true
    }, 60_000, 500)
    assert.ok(back, `not back ${Date.now() - restartedAt} ms after the restart: ${JSON.stringify(last)}\n` +
      `api1:\n${logTail('api1', 15)}\nn1:\n${logTail('n1', 15)}`)

    // The sandbox from before: listed, routed, running, with its files and processes.
    for (const base of [LB, API1, API2]) {
      const r = await api(base, 'GET', `/sandboxes/${old.id}`)
      assert.equal(r.status, 200, `GET ${old.id} through ${base}: ${r.status} ${r.text}`)
      assert.equal(r.node, old.node)
      const s = await Sandbox.connect(old.id, via(base))
      assert.equal((await s.commands.run('cat /home/user/before.txt')).stdout, 'before the restart\n')
    }
    assert.ok((await sbx.commands.list()).some((p) => p.pid === bg.pid), 'the background process of the old sandbox is gone')
    const listed = (await Sandbox.list({ ...via(LB), query: { metadata: t.metadata } }).nextItems()).map((s) => s.sandboxId)
    assert.deepEqual(listed, [old.id])

    // New work goes through: a create on every call, and a kill.
    const fresh = await t.createRaw(LB)
    assert.ok(NODE_IDS.includes(fresh.node))
    const f = await Sandbox.connect(fresh.id, via(LB))
    assert.equal((await f.commands.run('echo new')).stdout, 'new\n')
    assert.equal(await Sandbox.kill(fresh.id, via(LB)), true)
    t.forget(fresh.id)

    // No node was taken for lost on the way.
    for (const n of await nodes(LB)) assert.equal(n.state, 'live', `${n.id} is ${n.state} after the restart`)
  })
})
