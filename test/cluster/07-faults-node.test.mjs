// Fault: SIGKILL of a node. Within the bound (15 s without a heartbeat, plus
// the reaper's period) its sandboxes answer 404 saying they were lost, the
// node is listed lost, new creates go to the other nodes, and the sandboxes
// of the other nodes are untouched. Restarted (with the command
// run-cluster.sh used), the node reconciles: it is live again, and it never
// serves the lost sandbox (its processes and network namespace are gone).
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { Sandbox } from 'e2b'
import {
  LB, API1, API2, api, nodes, nodeURL, nodeFetch, asAPITier, tracker, via, waitUntil,
  killDaemon, restartNode, waitHealthy, logTail, sleep, TEST_TIMEOUT
} from './helpers.mjs'

const LOST_BOUND_MS = 25_000
const t = tracker('faults-node')
let victim
after(async () => {
  if (victim) {
    try { await waitHealthy(nodeURL(victim), 1_000) } catch {
      await restartNode(victim).catch(() => {})
    }
  }
  await t.killAll()
})

function netnsList () {
  return execFileSync('ip', ['netns', 'list']).toString()
}

describe('node killed', { timeout: TEST_TIMEOUT * 4 }, () => {
  let lostIds = []
  let survivors = []
  const prefix = (id) => process.env[`AIRLOCK_CLUSTER_PREFIX_${id.toUpperCase()}`]

  it('SIGKILL of a node: its sandboxes are reported lost within 25 s, creates go elsewhere, the others keep running', { timeout: TEST_TIMEOUT }, async () => {
    const placed = []
    for (let i = 0; i < 6; i++) placed.push(await t.createRaw(LB))
    const byNode = {}
    for (const s of placed) (byNode[s.node] ??= []).push(s)
    assert.ok(Object.keys(byNode).length >= 2, `6 creates all on one node: ${JSON.stringify(Object.keys(byNode))}`)
    victim = Object.keys(byNode)[0]
    lostIds = byNode[victim].map((s) => s.id)
    survivors = placed.filter((s) => s.node !== victim)
    // Something running in a survivor, to check it is untouched.
    const keep = await Sandbox.connect(survivors[0].id, via(LB))
    await keep.files.write('/home/user/keep.txt', 'kept\n')
    const bg = await keep.commands.run('sleep 600', { background: true })
    if (prefix(victim)) {
      assert.ok(netnsList().includes(`${prefix(victim)}-${lostIds[0]}`), `no netns ${prefix(victim)}-${lostIds[0]}:\n${netnsList()}`)
    }

    await killDaemon(victim)
    const killedAt = Date.now()

    // Lost within the bound, for every sandbox of the node, through the
    // balancer and through each api instance (before the reaper marks the
    // node, a request may still try it and answer 502).
    const deadline = killedAt + LOST_BOUND_MS
    for (const base of [LB, API1, API2]) {
      for (const id of lostIds) {
        let last
        const lost = await waitUntil(async () => {
          last = await api(base, 'GET', `/sandboxes/${id}`)
          return last.status === 404 && /lost/i.test(last.text)
        }, Math.max(deadline - Date.now(), 0), 250)
        assert.ok(lost, `GET ${id} (on ${victim}) through ${base} ${Date.now() - killedAt} ms after the kill: ${last?.status} ${last?.text}`)
      }
    }
    const lostMs = Date.now() - killedAt
    assert.ok(lostMs <= LOST_BOUND_MS + 1_000, `reported lost everywhere after ${lostMs} ms (bound ${LOST_BOUND_MS} ms)`)
    const listed = await Sandbox.list({ ...via(LB), query: { metadata: t.metadata } }).nextItems()
    const listedIds = listed.map((s) => s.sandboxId)
    for (const id of lostIds) assert.ok(!listedIds.includes(id), `lost sandbox ${id} still listed`)
    const ns = await nodes(LB)
    assert.equal(ns.find((n) => n.id === victim)?.state, 'lost', `node list: ${JSON.stringify(ns.map((n) => [n.id, n.state]))}`)

    // New creates go to the live nodes.
    for (let i = 0; i < 4; i++) {
      const s = await t.createRaw(LB)
      assert.notEqual(s.node, victim, `create ${i + 1} placed on the lost node ${victim}`)
    }

    // Nothing else lost: the other nodes' sandboxes all work.
    for (const s of survivors) {
      assert.ok(listedIds.includes(s.id), `surviving sandbox ${s.id} (on ${s.node}) not listed`)
      const sbx = await Sandbox.connect(s.id, via(LB))
      assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n', `sandbox ${s.id} on ${s.node}`)
    }
    assert.equal(await keep.files.read('/home/user/keep.txt'), 'kept\n')
    assert.ok((await keep.commands.list()).some((p) => p.pid === bg.pid), 'the background command of a surviving sandbox is gone')
    // Room for the next test (a node takes a few sandboxes: --node-cpus).
    await t.killAll()
  })

  it('the restarted node is live again and never serves the lost sandbox', { timeout: TEST_TIMEOUT }, async () => {
    assert.ok(victim, 'the kill test did not run')
    const restartMs = await restartNode(victim)
    console.log(`# ${victim} restarted and healthy ${restartMs} ms after the first start attempt`)
    let ns
    const live = await waitUntil(async () => {
      ns = await nodes(LB)
      const n = ns.find((x) => x.id === victim)
      return n?.state === 'live' && n.heartbeatAgeMs < 5_000
    }, 30_000, 500)
    assert.ok(live, `${victim} not live again: ${JSON.stringify(ns?.find((x) => x.id === victim))}\n${logTail(victim)}`)

    for (const id of lostIds) {
      for (const base of [LB, API1, API2]) {
        const r = await api(base, 'GET', `/sandboxes/${id}`)
        assert.equal(r.status, 404, `lost ${id} through ${base} after the node came back: ${r.status} ${r.text}`)
      }
      await assert.rejects(Sandbox.connect(id, via(LB)), `connect to the lost ${id}`)
      // The node itself, asked with the cluster secret, does not have it.
      const direct = await nodeFetch(`${nodeURL(victim)}/sandboxes/${id}`, { headers: asAPITier() })
      assert.equal(direct.status, 404, `${victim} itself answers ${direct.status} for the lost ${id}`)
    }
    // Its processes and network are gone (the node killed what the store says is gone).
    if (prefix(victim)) {
      const gone = await waitUntil(() => lostIds.every((id) => !netnsList().includes(`${prefix(victim)}-${id}`)), 20_000, 500)
      assert.ok(gone, `network namespaces of lost sandboxes remain:\n${netnsList()}`)
    }
    // And it takes new sandboxes again (once each api instance's placement
    // has reread the nodes table: every second).
    await sleep(2_000)
    let on = 0
    for (let i = 0; i < 6 && on === 0; i++) {
      if ((await t.createRaw(LB)).node === victim) on++
    }
    assert.ok(on > 0, `no create landed on the restarted ${victim}`)
    await t.killAll()
  })
})
