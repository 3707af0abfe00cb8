// Moves when a node goes away (run-cluster.sh --artifacts):
// - SIGKILL: its paused sandboxes are resumed on another node by a connect
//   through the api tier, while the node is only unreachable and once it is
//   marked lost (a Python variable kept); a create from a named snapshot made
//   there runs elsewhere; the node, started again, never serves them (they
//   stay where they were resumed, and a kill through the balancer works once);
// - SIGTERM: the node pauses and uploads every running sandbox, says it is
//   draining and exits; the next request for such a sandbox through the api
//   tier (sandbox traffic from the SDK, or an API call) resumes it on another
//   node with its processes and files; started again, the node goes live by
//   itself.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'
import {
  LB, API1, API2, NODE_IDS, ARTIFACTS, nodes, nodeURL, nodeFetch, asAPITier, tracker, via, uniq, waitUntil, logTail,
  pidOf, alive, killDaemon, restartNode, waitNodeState, restoreNodes, prepare, assertKept, where, listedOn, waitUploaded, TEST_TIMEOUT
} from './helpers.mjs'

const t = tracker('move-faults')
const snapshots = []
after(async () => {
  await restoreNodes()
  await Promise.allSettled(snapshots.map((id) => Sandbox.deleteSnapshot(id, via(LB))))
  await t.killAll()
})

const LOST_BOUND_MS = 25_000

/** GET /sandboxes/{id} on node itself (the api tier's headers): its status. */
async function onNode (node, id) {
  const r = await nodeFetch(`${nodeURL(node)}/sandboxes/${id}`, { headers: asAPITier(), timeoutMs: 10_000 })
  return r.status
}

describe('moves when a node goes away', { skip: !ARTIFACTS && 'the cluster has no artifact store (run-cluster.sh --artifacts)', timeout: TEST_TIMEOUT * 5 }, () => {
  before(async () => {
    await restoreNodes()
  })

  // SIGKILL, in three steps sharing K's state (each reports on its own).
  const K = NODE_IDS[1]
  let killedAt, p1, r1, w1, ci, src, snapName
  const copies = new Map() // when → node of a sandbox created from K's snapshot

  /** A create from K's snapshot through the balancer: it runs elsewhere, with the snapshot's file and process. */
  async function fromSnapshot (when) {
    const started = Date.now()
    const copy = await Sandbox.create(snapName, { ...via(LB), timeoutMs: 300_000, metadata: t.metadata, requestTimeoutMs: 180_000 })
    t.add(copy.sandboxId)
    assert.notEqual(copy.sandboxId, src.id)
    const cw = await where(copy.sandboxId)
    assert.notEqual(cw.node, K, `a create from the snapshot of the killed ${K} (${when}) landed on it`)
    assert.equal(await copy.files.read('/home/user/move.txt'), src.mark, 'the snapshot\'s file')
    assert.ok((await copy.commands.list()).some((p) => p.pid === src.pid), 'the snapshot\'s background process is not in the copy')
    console.log(`# create from the snapshot of the killed ${K} (${when}): ${Date.now() - started} ms on ${cw.node}`)
    copies.set(when, cw.node)
  }

  it('SIGKILL of a node: while it is unreachable, a connect resumes its paused sandbox elsewhere, and a create from its snapshot runs elsewhere', { timeout: TEST_TIMEOUT }, async () => {
    // On K: a paused base sandbox, a paused code interpreter holding x = 41,
    // and a named snapshot of a running sandbox.
    p1 = await prepare(t, K)
    ci = await t.createOn(K, 'code-interpreter-v1', 600)
    const interp = await CodeSandbox.connect(ci.id, via(LB))
    assert.equal((await interp.runCode('x = 41\nx', { timeoutMs: 120_000 })).text, '41')
    await interp.files.write('/home/user/interp.txt', 'kept with x\n')
    src = await prepare(t, K)
    snapName = `move-kill-${uniq()}`
    const snap = await src.sbx.createSnapshot({ name: snapName, requestTimeoutMs: 180_000 })
    snapshots.push(snap.snapshotId)
    assert.equal(await p1.sbx.betaPause({ requestTimeoutMs: 120_000 }), true)
    assert.equal(await interp.betaPause({ requestTimeoutMs: 120_000 }), true)
    // Their images in the store (the upload follows the pause's answer; a
    // node killed before is 13-pause-upload.test.mjs's case).
    await waitUploaded(K, p1.id)
    await waitUploaded(K, ci.id)

    await killDaemon(K)
    killedAt = Date.now()

    // Unreachable (not yet marked lost): a connect resumes it elsewhere.
    r1 = await Sandbox.connect(p1.id, { ...via(LB), requestTimeoutMs: 120_000 })
    const at1 = Date.now() - killedAt
    w1 = await where(p1.id)
    assert.equal(w1.status, 200)
    assert.equal(w1.state, 'running')
    assert.notEqual(w1.node, K, `${p1.id} resumed on the killed ${K}`)
    assert.ok(NODE_IDS.includes(w1.node))
    console.log(`# paused sandbox of the killed ${K} resumed on ${w1.node}, ${at1} ms after the kill`)
    await assertKept(p1, r1)

    // A create from the snapshot made on K, still unreachable.
    const beforeLost = Date.now() - killedAt
    await fromSnapshot('unreachable')
    assert.ok(beforeLost < 15_000, `(the create was sent ${beforeLost} ms after the kill: K may have been lost already)`)
  })

  it('SIGKILL of a node: once it is lost, a connect resumes its paused code interpreter elsewhere (x kept), and its snapshot still starts elsewhere', { timeout: TEST_TIMEOUT }, async () => {
    assert.ok(killedAt, 'the kill test did not get to the kill')
    await waitNodeState(K, 'lost', Math.max(LOST_BOUND_MS - (Date.now() - killedAt), 1_000))
    const r2 = await CodeSandbox.connect(ci.id, { ...via(LB), requestTimeoutMs: 120_000 })
    const w2 = await where(ci.id)
    assert.equal(w2.status, 200)
    assert.equal(w2.state, 'running')
    assert.notEqual(w2.node, K)
    const x = await r2.runCode('x + 1', { timeoutMs: 120_000 })
    assert.equal(x.error, undefined, JSON.stringify(x.error))
    assert.equal(x.text, '42', 'x after the resume on another node')
    assert.equal(await r2.files.read('/home/user/interp.txt'), 'kept with x\n')
    console.log(`# paused interpreter of the lost ${K} resumed on ${w2.node}`)
    ci.movedTo = w2.node
    await fromSnapshot('lost')
  })

  it('SIGKILL of a node: back, it reconciles, goes live and never serves the sandboxes resumed elsewhere; a kill through the balancer works once', { timeout: TEST_TIMEOUT }, async () => {
    assert.ok(killedAt, 'the kill test did not get to the kill')
    const restartMs = await restartNode(K)
    await waitNodeState(K, 'live', 30_000, (n) => n.heartbeatAgeMs < 5_000).catch((err) => {
      throw new Error(`${err.message}\n${logTail(K)}`)
    })
    console.log(`# ${K} back and live (${restartMs} ms to healthy)`)
    const resumed = [[p1.id, w1?.node], [ci.id, ci.movedTo]].filter(([, node]) => node)
    assert.ok(resumed.length > 0, 'nothing was resumed elsewhere by the tests before')
    for (const [id, node] of resumed) {
      for (const base of [LB, API1, API2]) {
        assert.deepEqual(await where(id, base), { status: 200, node, state: 'running' }, `${id} through ${base} after ${K} came back`)
      }
      assert.equal(await onNode(K, id), 404, `the restarted ${K} itself answers for ${id}`)
    }
    assert.deepEqual(await listedOn(t, resumed.map(([id]) => id)), Object.fromEntries(resumed))
    if (w1) {
      await assertKept(p1, r1)
      // A kill through the balancer works once.
      assert.equal(await Sandbox.kill(p1.id, via(LB)), true)
      assert.equal(await Sandbox.kill(p1.id, via(LB)), false)
      t.forget(p1.id)
    }
    if (ci.movedTo) {
      const r2 = await CodeSandbox.connect(ci.id, via(LB))
      assert.equal((await r2.runCode('x', { timeoutMs: 60_000 })).text, '41')
    }
  })

  it('SIGTERM of a node: it pauses and uploads its sandboxes, drains and exits; the next request resumes them elsewhere; restarted it goes live by itself', { timeout: TEST_TIMEOUT * 2 }, async () => {
    const T = NODE_IDS[2]
    const a = await prepare(t, T)
    const b = await prepare(t, T)
    const pid = pidOf(T)

    const termAt = Date.now()
    process.kill(pid, 'SIGTERM')
    // Draining while it pauses; then it exits.
    let sawDraining = false
    let last
    const exited = await waitUntil(async () => {
      try {
        last = (await nodes(LB)).find((n) => n.id === T)
        if (last?.state === 'draining') sawDraining = true
      } catch {}
      return !alive(pid)
    }, 120_000, 250)
    assert.ok(exited, `${T} (pid ${pid}) still runs 120 s after SIGTERM\n${logTail(T)}`)
    const exitMs = Date.now() - termAt
    if (!sawDraining) {
      last = (await nodes(LB)).find((n) => n.id === T)
      sawDraining = last?.state === 'draining'
    }
    assert.ok(sawDraining, `${T} never listed draining around its SIGTERM exit: ${JSON.stringify(last)}\n${logTail(T)}`)
    console.log(`# ${T} paused its 2 sandboxes and exited ${exitMs} ms after SIGTERM`)

    // Sandbox traffic (a command through the SDK object made before) brings
    // a back on another node, transparently.
    const started = Date.now()
    const r = await a.sbx.commands.run('cat /home/user/move.txt', { requestTimeoutMs: 120_000 })
    console.log(`# the first command for a sandbox of the stopped ${T} took ${Date.now() - started} ms`)
    assert.equal(r.stdout, a.mark)
    const wa = await where(a.id)
    assert.equal(wa.state, 'running')
    assert.notEqual(wa.node, T)
    assert.ok(NODE_IDS.includes(wa.node))
    await assertKept(a, a.sbx)

    // An API call (the SDK's connect) brings b back too.
    const rb = await Sandbox.connect(b.id, { ...via(LB), requestTimeoutMs: 120_000 })
    const wb = await where(b.id)
    assert.equal(wb.state, 'running')
    assert.notEqual(wb.node, T)
    await assertKept(b, rb)
    assert.deepEqual(await listedOn(t, [a.id, b.id]), { [a.id]: wa.node, [b.id]: wb.node })

    // Started again (no undrain), it goes live by itself and serves neither.
    const restartMs = await restartNode(T)
    await waitNodeState(T, 'live', 60_000, (n) => n.heartbeatAgeMs < 5_000).catch((err) => {
      throw new Error(`${err.message}\n${logTail(T)}`)
    })
    console.log(`# ${T} started again: live (${restartMs} ms to healthy)`)
    for (const [m, node] of [[a, wa.node], [b, wb.node]]) {
      assert.deepEqual(await where(m.id), { status: 200, node, state: 'running' }, `${m.id} after ${T} came back`)
      assert.equal(await onNode(T, m.id), 404, `the restarted ${T} itself answers for ${m.id}`)
    }
    await assertKept(a, a.sbx)
  })
})
