// The activity feed (issue 28 part 2) of a sandbox that moves to another
// node, followed through the api tier. The api tier routes
// GET /sandboxes/{id}/activity to the sandbox's node; a sandbox's entries
// stay on the node that made them (dropped with the sandbox there), and the
// node it arrives on numbers its entries past any id the old one gave
// (activity.Hub.Arriving: the time in microseconds), so a follower that
// reconnects with Last-Event-ID (or ?since=) gets the new node's entries,
// none missed, none twice.
//
// Here: a sandbox on A, an SSE follower through the balancer sees a
// process of the sandbox's own code; the sandbox is paused (its image
// uploaded), A drains without moving (?move=false) and a connect through
// the api tier resumes it on another node; the follower's stream ends with
// the sandbox on A, a reconnect with the last id gets the process started
// on the new node, with a larger id.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import {
  LB, NODE_IDS, ARTIFACTS, API_KEY, tracker, via, sleep, waitUntil, drainNode, waitNodeState,
  restoreNodes, waitUploaded, where, logGrep, TEST_TIMEOUT
} from './helpers.mjs'

const t = tracker('activity-move')
after(async () => {
  await t.killAll()
  await restoreNodes()
})

const [A] = NODE_IDS

/**
 * Follows GET /sandboxes/{id}/activity as server-sent events through the
 * balancer from lastId (Last-Event-ID); entries land in out. Returns
 * {done (a promise: the stream ended), close()}.
 */
function follow (id, lastId, out) {
  const ac = new AbortController()
  const headers = { 'X-API-Key': API_KEY, Accept: 'text/event-stream' }
  if (lastId !== undefined) headers['Last-Event-ID'] = String(lastId)
  const done = (async () => {
    const res = await fetch(`${LB}/sandboxes/${id}/activity?types=process`, { headers, signal: ac.signal })
    assert.equal(res.status, 200, `activity stream of ${id}: ${res.status}`)
    const dec = new TextDecoder()
    let buf = ''
    for await (const chunk of res.body) {
      buf += dec.decode(chunk, { stream: true })
      let i
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, i)
        buf = buf.slice(i + 2)
        const data = ev.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n')
        if (data) out.push(JSON.parse(data))
      }
    }
  })().catch((err) => { if (err.name !== 'AbortError') throw err })
  return { done, close: () => ac.abort() }
}

const started = (es, argv) => es.find((e) => e.type === 'process.start' && (e.data?.argv ?? []).join(' ') === argv)

describe('the activity feed of a sandbox moved to another node', { skip: !ARTIFACTS && 'the cluster has no artifact store (run-cluster.sh --artifacts)', timeout: TEST_TIMEOUT * 3 }, () => {
  it('a follower through the api tier reconnects with Last-Event-ID and gets the new node\'s entries, ids growing', { timeout: TEST_TIMEOUT * 3 }, async () => {
    await restoreNodes()
    const s = await t.createOn(A)
    const sbx = await Sandbox.connect(s.id, via(LB))
    const seen = []
    const f1 = follow(s.id, undefined, seen)
    await sbx.commands.run("sh -c 'sleep 0.3 &'")
    await waitUntil(() => started(seen, 'sleep 0.3'), 30_000)
    const before = started(seen, 'sleep 0.3')
    assert.ok(before, `no process.start of the process on ${A} on the stream: ${JSON.stringify(seen)}`)

    assert.equal(await sbx.betaPause({ requestTimeoutMs: 120_000 }), true)
    await waitUploaded(A, s.id)
    try {
      const d = await drainNode(A, { move: false })
      assert.equal(d.status, 200, `drain ${A}?move=false: ${d.status} ${d.text}`)
      await waitNodeState(A, 'draining', 10_000)
      await sleep(2_000) // each api instance's placement rereads the nodes every second
      const resumed = await Sandbox.connect(s.id, via(LB))
      const w = await where(s.id)
      assert.equal(w.state, 'running')
      assert.notEqual(w.node, A, `the sandbox was resumed on the draining node ${A}\n${logGrep(A, s.id)}`)

      // The stream from A ends once A let the sandbox go.
      const ended = await Promise.race([f1.done.then(() => true), sleep(60_000).then(() => false)])
      f1.close()
      assert.ok(ended, `the stream from ${A} is still open a minute after the sandbox left it`)
      const lastId = seen.filter((e) => e.id).at(-1).id

      const after = []
      const f2 = follow(s.id, lastId, after)
      try {
        await resumed.commands.run("sh -c 'sleep 0.2 &'")
        await waitUntil(() => started(after, 'sleep 0.2'), 30_000)
        const moved = started(after, 'sleep 0.2')
        assert.ok(moved, `no process.start on ${w.node} after Last-Event-ID ${lastId}: ${JSON.stringify(after)}`)
        assert.ok(moved.id > lastId, `id ${moved.id} on ${w.node} is not past ${lastId} (${A}'s last)`)
        for (const e of after.filter((e) => e.id)) assert.ok(e.id > lastId, `entry ${e.id} repeats or precedes ${lastId}`)
        const ids = after.filter((e) => e.id).map((e) => e.id)
        assert.deepEqual(ids, [...ids].sort((a, b) => a - b), 'ids grow')
        assert.ok(Number.isSafeInteger(moved.id), `id ${moved.id} is not an exact JavaScript number`)
        // ?since= through the api tier agrees.
        const r = await fetch(`${LB}/sandboxes/${s.id}/activity?types=process&since=${lastId}`, { headers: { 'X-API-Key': API_KEY } })
        assert.equal(r.status, 200)
        assert.ok(started(await r.json(), 'sleep 0.2'), '?since= misses the new node\'s entry')
      } finally {
        f2.close()
      }
    } finally {
      await restoreNodes()
    }
  })
})
