// The CLI against the cluster (E2B_API_URL = haproxy): `airlock node ls`
// lists the nodes, `airlock node drain` stops placement on one (its
// sandboxes keep running: moved to other nodes, 09-move.test.mjs checks
// where), `airlock node undrain` lets placement use it again.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { Sandbox } from 'e2b'
import { LB, NODE_IDS, ARTIFACTS, api, nodes, tracker, via, waitUntil, sleep, TEST_TIMEOUT } from './helpers.mjs'

const BIN = process.env.AIRLOCK_CLUSTER_BIN || new URL('../../bin/airlock', import.meta.url).pathname
const t = tracker('drain')
let drained
after(async () => {
  if (drained) await api(LB, 'POST', `/airlock/v1/nodes/${drained}/undrain`).catch(() => {})
  await t.killAll()
})

function cli (...args) {
  return execFileSync(BIN, args, {
    env: { ...process.env, E2B_API_URL: LB, E2B_API_KEY: process.env.E2B_API_KEY },
    encoding: 'utf8',
    timeout: 30_000
  })
}

// cliFailing runs the CLI expecting it to fail: {status, stdout, stderr}.
function cliFailing (...args) {
  try {
    const stdout = execFileSync(BIN, args, {
      env: { ...process.env, E2B_API_URL: LB, E2B_API_KEY: process.env.E2B_API_KEY },
      encoding: 'utf8',
      timeout: 120_000,
      stdio: ['ignore', 'pipe', 'pipe']
    })
    return { status: 0, stdout, stderr: '' }
  } catch (err) {
    if (err.status == null) throw err
    return { status: err.status, stdout: err.stdout, stderr: err.stderr }
  }
}

describe('node CLI and drain', { timeout: TEST_TIMEOUT * 3 }, () => {
  it('airlock node ls lists the 3 nodes live (table and --json)', { timeout: TEST_TIMEOUT }, async () => {
    const table = cli('node', 'ls')
    const lines = table.trim().split('\n')
    assert.match(lines[0], /^NODE\s+STATE/)
    for (const id of NODE_IDS) {
      assert.ok(lines.some((l) => new RegExp(`^${id}\\s+live\\s`).test(l)), `no live ${id} in:\n${table}`)
    }
    const json = JSON.parse(cli('node', 'ls', '--json'))
    assert.deepEqual(json.map((n) => n.id).sort(), [...NODE_IDS].sort())
  })

  it('airlock node drain: no new sandbox there, the ones there keep running; undrain: placed there again', { timeout: TEST_TIMEOUT }, async () => {
    // A sandbox on the node we drain.
    let onIt
    for (let i = 0; i < 6 && !onIt; i++) {
      const s = await t.createRaw(LB)
      if (!drained) drained = s.node
      if (s.node === drained) onIt = s
    }
    assert.ok(onIt)
    // Keep only that one: the other nodes must have room for the creates below.
    t.forget(onIt.id)
    await t.killAll()
    t.add(onIt.id)
    if (ARTIFACTS) {
      assert.equal(cli('node', 'drain', drained).trim(), drained)
    } else {
      // Nothing can move without a store: the drain says so and exits 1
      // (the next test checks the message), the sandbox stays and runs.
      const r = cliFailing('node', 'drain', drained)
      assert.equal(r.status, 1, `exit code ${r.status}; stderr: ${r.stderr}`)
    }
    let ns
    assert.ok(await waitUntil(async () => {
      ns = await nodes(LB)
      return ns.find((n) => n.id === drained)?.state === 'draining'
    }, 10_000), `${drained} not draining: ${JSON.stringify(ns?.map((n) => [n.id, n.state]))}`)
    // The node list reads the store; each api instance's placement sees
    // the nodes table again every second (cluster.HeartbeatInterval/2).
    await sleep(2_000)

    for (let i = 0; i < 5; i++) {
      const s = await t.createRaw(LB)
      assert.notEqual(s.node, drained, `create ${i + 1} placed on the drained ${drained}`)
    }
    const sbx = await Sandbox.connect(onIt.id, via(LB))
    assert.equal((await sbx.commands.run('echo still-running')).stdout, 'still-running\n')
    await t.killAll()

    assert.equal(cli('node', 'undrain', drained).trim(), drained)
    assert.ok(await waitUntil(async () => {
      ns = await nodes(LB)
      return ns.find((n) => n.id === drained)?.state === 'live'
    }, 10_000), `${drained} not live after undrain: ${JSON.stringify(ns?.map((n) => [n.id, n.state]))}`)
    let back = false
    for (let i = 0; i < 6 && !back; i++) back = (await t.createRaw(LB)).node === drained
    assert.ok(back, `no create placed on ${drained} after undrain`)
    drained = undefined
    await t.killAll()
  })
  it('airlock node drain of a node whose sandbox cannot move exits 1 and names the sandbox and why', { timeout: TEST_TIMEOUT, skip: !ARTIFACTS && 'no artifact store: a drain moves nothing there (scripts/test.sh runs the cluster with one)' }, async () => {
    // A sandbox paused without its memory (disk only) cannot move to another node.
    const s = await t.createRaw(LB)
    drained = s.node
    const p = await api(LB, 'POST', `/sandboxes/${s.id}/pause`, { memory: false })
    assert.equal(p.status, 204, `disk-only pause of ${s.id}: ${p.status} ${p.text}`)
    let res
    try {
      execFileSync(BIN, ['node', 'drain', drained], {
        env: { ...process.env, E2B_API_URL: LB, E2B_API_KEY: process.env.E2B_API_KEY },
        encoding: 'utf8',
        timeout: 120_000,
        stdio: ['ignore', 'pipe', 'pipe']
      })
    } catch (err) {
      res = err
    }
    assert.ok(res, 'airlock node drain exited 0 although a sandbox could not move')
    assert.equal(res.status, 1, `exit code ${res.status}; stderr: ${res.stderr}`)
    assert.equal(res.stdout.trim(), drained)
    assert.match(res.stderr, new RegExp(`not moved ${s.id}: .*without its memory`), res.stderr)
    assert.match(res.stderr, /1 sandboxes could not move/, res.stderr)
    assert.equal(cli('node', 'undrain', drained).trim(), drained)
    drained = undefined
    await t.killAll()
  })
  it('airlock node drain of a node with sandboxes, in a cluster without an artifact store, exits 1 and says why', { timeout: TEST_TIMEOUT, skip: ARTIFACTS ? 'the cluster has an artifact store (run-cluster.sh without --artifacts runs this)' : false }, async () => {
    const s = await t.createRaw(LB)
    drained = s.node
    const r = cliFailing('node', 'drain', drained)
    assert.equal(r.status, 1, `airlock node drain exited ${r.status} although its sandbox cannot move; stderr: ${r.stderr}`)
    assert.equal(r.stdout.trim(), drained)
    assert.match(r.stderr, new RegExp(`not moved ${s.id}: the cluster has no artifact store \\(airlock serve --artifacts\\): sandbox ${s.id} cannot move to another node and stays on node ${drained}`), r.stderr)
    assert.match(r.stderr, new RegExp(`drain ${drained}: \\d+ sandboxes could not move`), r.stderr)
    // It stays, running, where it was.
    const sbx = await Sandbox.connect(s.id, via(LB))
    assert.equal((await sbx.commands.run('echo stayed')).stdout, 'stayed\n')
    assert.equal(cli('node', 'undrain', drained).trim(), drained)
    drained = undefined
    await t.killAll()
  })
})
