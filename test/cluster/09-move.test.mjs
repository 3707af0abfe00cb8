// Sandboxes and named snapshots move between nodes through the artifact
// store (run-cluster.sh --artifacts: in CI a real S3 server, versitygw):
// - a pause uploads the checkpoint and the writable layer (after it answered:
//   13-pause-upload.test.mjs); with S3 unreachable it fails (503, "artifact
//   store", "keeps running") and the sandbox goes on running; once S3 is back
//   the pause works;
// - a paused sandbox whose node is draining is resumed on another node by a
//   connect through the api tier (drain ?move=false only stops placement);
// - a drain moves the node's sandboxes: running ones paused to S3 and resumed
//   elsewhere (same id, processes, memory — a Python variable —, files and
//   timeout), paused ones handed to another node (still paused there); a
//   named snapshot made there starts sandboxes on the other nodes.
// Each "nothing lost" check: the same sandbox id, a file written before, a
// background process still alive with the same pid and still counting.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'
import {
  LB, NODE_IDS, ARTIFACTS, api, nodes, tracker, via, uniq, sleep, waitUntil, logTail, logGrep,
  drainNode, undrainNode, waitNodeState, restoreNodes,
  s3Controllable, s3Running, stopS3, startS3, s3Keys, waitUploaded, prepare, assertKept, where, listedOn, TEST_TIMEOUT
} from './helpers.mjs'

const t = tracker('move')
const snapshots = []
after(async () => {
  if (s3Controllable() && !s3Running()) await startS3().catch((err) => console.log(`# S3 restart failed: ${err.message}`))
  await Promise.allSettled(snapshots.map((id) => Sandbox.deleteSnapshot(id, via(LB))))
  await t.killAll()
  await restoreNodes()
})

const [A, B, C] = NODE_IDS

describe('moves through the artifact store', { skip: !ARTIFACTS && 'the cluster has no artifact store (run-cluster.sh --artifacts)', timeout: TEST_TIMEOUT * 5 }, () => {
  before(async () => {
    // Every node live (the files before may have killed or drained one).
    await restoreNodes()
  })

  it('a pause uploads; with S3 stopped it answers 503 and the sandbox keeps running; with S3 back it pauses and resumes', { timeout: TEST_TIMEOUT, skip: !s3Controllable() && 'the S3 server cannot be restarted from here (scripts/test.sh links cmd/s3)' }, async () => {
    const m = await prepare(t, A)
    await stopS3()
    let refused
    try {
      const started = Date.now()
      refused = await api(LB, 'POST', `/sandboxes/${m.id}/pause`, undefined, 120_000)
      const ms = Date.now() - started
      assert.equal(refused.status, 503, `pause of ${m.id} on ${A} with S3 stopped: ${refused.status} ${refused.text} (after ${ms} ms)\n${logGrep(A, m.id)}`)
      assert.match(refused.text, /artifact store/i, `pause with S3 stopped: ${refused.text}`)
      assert.match(refused.text, /keeps running/i, `pause with S3 stopped: ${refused.text}`)
      console.log(`# pause with S3 stopped refused after ${ms} ms: ${refused.text}`)
      // Still running, where it was, with everything.
      const w = await where(m.id)
      assert.equal(w.state, 'running', `state after the refused pause: ${JSON.stringify(w)}`)
      assert.equal(w.node, A)
      await assertKept(m, m.sbx)
    } finally {
      await startS3()
    }
    // S3 is back: the pause goes through (and uploads).
    const started = Date.now()
    assert.equal(await m.sbx.betaPause({ requestTimeoutMs: 120_000 }), true, 'pause once S3 is back')
    console.log(`# pause (upload) ${Date.now() - started} ms`)
    assert.equal((await where(m.id)).state, 'paused')
    await waitUploaded(A, m.id) // the upload follows the pause's answer
    const keys = s3Keys(m.id)
    if (keys !== undefined) {
      assert.ok(keys.length > 0, `no object in the artifact store names the paused ${m.id}`)
      console.log(`# in the artifact store: ${keys.join(' ')}`)
    }
    const resumed = await Sandbox.connect(m.id, { ...via(LB), requestTimeoutMs: 120_000 })
    assert.equal(resumed.sandboxId, m.id)
    assert.equal((await where(m.id)).state, 'running')
    await assertKept(m, resumed)
  })

  it('drain ?move=false only stops placement; a paused sandbox on the draining node is resumed on another one by connect', { timeout: TEST_TIMEOUT }, async () => {
    const m = await prepare(t, B)
    const stay = await prepare(t, B)
    assert.equal(await m.sbx.betaPause({ requestTimeoutMs: 120_000 }), true)
    try {
      const d = await drainNode(B, { move: false })
      assert.equal(d.status, 200, `drain ${B}?move=false: ${d.status} ${d.text}`)
      assert.equal(d.body?.id, B)
      assert.equal(d.body?.state, 'draining')
      assert.deepEqual(d.body?.moved ?? [], [], `drain ?move=false moved sandboxes: ${d.text}`)
      await waitNodeState(B, 'draining', 10_000)
      await sleep(2_000) // each api instance's placement rereads the nodes every second

      // The running one was not moved. (The paused one is not looked at
      // here: any request for it through the api tier, a GET included,
      // hands it to a live node.)
      assert.deepEqual(await where(stay.id), { status: 200, node: B, state: 'running' })
      await assertKept(stay, stay.sbx)

      // The paused one, connected to, comes back on another node.
      const started = Date.now()
      const resumed = await Sandbox.connect(m.id, { ...via(LB), requestTimeoutMs: 120_000 })
      const ms = Date.now() - started
      assert.equal(resumed.sandboxId, m.id)
      const w = await where(m.id)
      assert.equal(w.status, 200)
      assert.equal(w.state, 'running')
      assert.notEqual(w.node, B, `connect resumed ${m.id} on the draining ${B}`)
      assert.ok(NODE_IDS.includes(w.node), `X-Airlock-Node ${w.node}`)
      console.log(`# connect of a paused sandbox on the draining ${B}: resumed on ${w.node} in ${ms} ms`)
      await assertKept(m, resumed)
      assert.deepEqual(await listedOn(t, [m.id]), { [m.id]: w.node }, 'the list names the new node')
      // And it lives on there: a command through the old SDK object too.
      assert.equal((await m.sbx.commands.run('echo on-the-new-node')).stdout, 'on-the-new-node\n')
    } finally {
      await undrainNode(B)
    }
  })

  it('drain moves the node\'s sandboxes: running ones resumed elsewhere (processes, memory, files, timeout), paused ones handed over; its snapshot starts elsewhere', { timeout: TEST_TIMEOUT * 2 }, async () => {
    // On C: a running sandbox with a long timeout, a paused one, and a code
    // interpreter holding x = 41 with a named snapshot of it.
    const run = await prepare(t, C, { timeout: 900 })
    const paused = await prepare(t, C)
    assert.equal(await paused.sbx.betaPause({ requestTimeoutMs: 120_000 }), true)
    const ci = await t.createOn(C, 'code-interpreter-v1', 600)
    const interp = await CodeSandbox.connect(ci.id, via(LB))
    const set = await interp.runCode('x = 41\nx', { timeoutMs: 120_000 })
    assert.equal(set.error, undefined, JSON.stringify(set.error))
    assert.equal(set.text, '41')
    await interp.files.write('/home/user/snap.txt', `snapped on ${C}\n`)
    const snapName = `move-snap-${uniq()}`
    const snap = await interp.createSnapshot({ name: snapName, requestTimeoutMs: 180_000 })
    snapshots.push(snap.snapshotId)
    // The timeouts as they are before the drain.
    const endBefore = {}
    for (const id of [run.id, ci.id]) endBefore[id] = Date.parse((await api(LB, 'GET', `/sandboxes/${id}`)).body.endAt)

    let d
    try {
      const started = Date.now()
      d = await drainNode(C)
      const ms = Date.now() - started
      assert.equal(d.status, 200, `drain ${C}: ${d.status} ${d.text}\n${logTail(C, 20)}`)
      console.log(`# drain of ${C} with 3 sandboxes took ${ms} ms: ${d.text}`)
      assert.equal(d.body.id, C)
      assert.equal(d.body.state, 'draining')
      assert.deepEqual(d.body.failed ?? [], [], `drain ${C} failed to move: ${d.text}`)
      const moved = Object.fromEntries((d.body.moved ?? []).map((x) => [x.sandboxId, x]))
      for (const [id, state] of [[run.id, 'running'], [paused.id, 'paused'], [ci.id, 'running']]) {
        assert.ok(moved[id], `drain ${C}: ${id} not in moved: ${d.text}`)
        assert.equal(moved[id].state, state, `drain ${C}: ${id}: ${JSON.stringify(moved[id])}`)
        assert.notEqual(moved[id].node, C)
        assert.ok(NODE_IDS.includes(moved[id].node), `moved to ${moved[id].node}`)
        // The api tier routes it to the node the drain named.
        const w = await where(id)
        assert.deepEqual(w, { status: 200, node: moved[id].node, state }, `${id} after the drain`)
      }
      assert.deepEqual(await listedOn(t, [run.id, paused.id, ci.id]),
        { [run.id]: moved[run.id].node, [paused.id]: moved[paused.id].node, [ci.id]: moved[ci.id].node }, 'the list names the new nodes')

      // The running ones kept everything, through the SDK objects made
      // before the move (sandbox traffic follows the sandbox).
      await assertKept(run, run.sbx)
      const x = await interp.runCode('x + 1', { timeoutMs: 120_000 })
      assert.equal(x.error, undefined, JSON.stringify(x.error))
      assert.equal(x.text, '42', 'the interpreter\'s x after the move')
      // Their timeouts are kept (not reset to a default): what was left
      // when the move paused them runs again from the resume, so the end
      // moves later by at most the drain's own time.
      for (const id of [run.id, ci.id]) {
        const end = Date.parse((await api(LB, 'GET', `/sandboxes/${id}`)).body.endAt)
        const msg = `${id}: endAt ${new Date(endBefore[id]).toISOString()} before the drain (${ms} ms), ${new Date(end).toISOString()} after`
        assert.ok(end >= endBefore[id] - 2_000 && end <= endBefore[id] + ms + 5_000, msg)
      }

      // The paused one resumes where it was handed.
      const resumed = await Sandbox.connect(paused.id, { ...via(LB), requestTimeoutMs: 120_000 })
      assert.deepEqual(await where(paused.id), { status: 200, node: moved[paused.id].node, state: 'running' })
      await assertKept(paused, resumed)

      // The drained node holds nothing any more (its heartbeat says so).
      let n
      const empty = await waitUntil(async () => {
        n = (await nodes(LB)).find((x) => x.id === C)
        return n?.sandboxes === 0
      }, 15_000, 500)
      assert.ok(empty, `${C} still counts sandboxes after the drain: ${JSON.stringify(n)}`)

      // The snapshot made on C starts a sandbox on another node, with its
      // files and memory.
      const started2 = Date.now()
      const copy = await CodeSandbox.create(snapName, { ...via(LB), timeoutMs: 300_000, metadata: t.metadata, requestTimeoutMs: 180_000 })
      t.add(copy.sandboxId)
      const cw = await where(copy.sandboxId)
      assert.notEqual(cw.node, C, `a create from the snapshot of ${C} landed on the draining ${C}`)
      console.log(`# create from the snapshot made on ${C}: ${Date.now() - started2} ms on ${cw.node}`)
      const y = await copy.runCode('x + 1', { timeoutMs: 120_000 })
      assert.equal(y.error, undefined, JSON.stringify(y.error))
      assert.equal(y.text, '42', 'x in a sandbox from the snapshot')
      assert.equal(await copy.files.read('/home/user/snap.txt'), `snapped on ${C}\n`)
    } finally {
      await undrainNode(C)
    }
  })
})
