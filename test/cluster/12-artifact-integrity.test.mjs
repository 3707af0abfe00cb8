// Security review M4 through the real cluster: the artifact store (versitygw
// in CI) is trusted for availability, not integrity. Whoever can write the
// bucket rewrites a victim's paused image ref to name another sandbox's
// image, with metadata that matches the new content (the object and its
// x-amz-meta-* are copied as S3 stores them). A resume of the victim on
// another node must refuse (the digest its node recorded in the row does not
// match) and restore nothing; the victim stays paused, and never resumes
// with the attacker's state.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { Sandbox } from 'e2b'
import {
  LB, NODE_IDS, ARTIFACTS, api, tracker, via, sleep, logGrep,
  drainNode, undrainNode, waitNodeState, restoreNodes, s3Keys, waitUploaded, prepare, assertKept, where, TEST_TIMEOUT
} from './helpers.mjs'

const t = tracker('integrity')
after(async () => {
  await t.killAll()
  await restoreNodes()
})

const [A] = NODE_IDS

/** The path (relative to the S3 server's root) of the paused image ref of id: bucket/prefix/paused/<id>/<nonce>. */
function pausedRef (id) {
  const keys = (s3Keys(`paused/${id}/`) || []).filter((k) => /\/paused\/[^/]+\/[^/]+$/.test(k))
  assert.equal(keys.length, 1, `one paused image ref of ${id} in the store: ${JSON.stringify(keys)}`)
  return keys[0]
}

describe('M4: the artifact store is not trusted for integrity', {
  skip: (!ARTIFACTS || !process.env.AIRLOCK_CLUSTER_S3_DIR) && 'needs the cluster stage\'s S3 server (scripts/test.sh)',
  timeout: TEST_TIMEOUT * 3
}, () => {
  before(async () => { await restoreNodes() })

  it('M4: a paused image ref rewritten to name another sandbox\'s image is refused on resume elsewhere; the victim stays paused and never runs the attacker\'s state', { timeout: TEST_TIMEOUT * 2 }, async () => {
    const victim = await prepare(t, A)
    const attacker = await prepare(t, A)
    await attacker.sbx.files.write('/home/user/move.txt', 'ATTACKER STATE\n')
    assert.equal(await victim.sbx.betaPause({ requestTimeoutMs: 120_000 }), true, 'pause of the victim')
    assert.equal(await attacker.sbx.betaPause({ requestTimeoutMs: 120_000 }), true, 'pause of the attacker')
    await waitUploaded(A, victim.id) // the upload follows the pause's answer
    await waitUploaded(A, attacker.id)
    const root = `${process.env.AIRLOCK_CLUSTER_S3_DIR}/root`
    const vRef = `${root}/${pausedRef(victim.id)}`
    const aRef = `${root}/${pausedRef(attacker.id)}`
    assert.ok(existsSync(vRef) && existsSync(aRef))
    // The rewrite, as a bucket writer would do it: content and metadata
    // (versitygw keeps x-amz-meta-* in xattrs) of the attacker's ref.
    execFileSync('cp', ['--preserve=all', aRef, vRef])

    try {
      const d = await drainNode(A, { move: false })
      assert.equal(d.status, 200, `drain ${A}?move=false: ${d.status} ${d.text}`)
      await waitNodeState(A, 'draining', 10_000)
      await sleep(2_000) // each api instance's placement rereads the nodes every second

      // A connect moves the paused victim to another node, which must refuse
      // the rewritten image.
      let err
      try {
        const s = await Sandbox.connect(victim.id, { ...via(LB), requestTimeoutMs: 120_000 })
        const host = await s.commands.run('cat /home/user/move.txt').catch((e) => ({ stdout: `(command failed: ${e.message})` }))
        assert.fail(`the victim ${victim.id} was resumed from the rewritten image; its file reads ${JSON.stringify(host.stdout)}`)
      } catch (e) {
        if (e instanceof assert.AssertionError) throw e
        err = e
      }
      console.log(`# resume elsewhere of the rewritten image refused: ${err.message}`)
      const nodesLog = NODE_IDS.map((n) => logGrep(n, victim.id, 5)).join('\n')
      assert.match(`${err.message}\n${nodesLog}`, /digest|integrity|mismatch/i, `the refusal names the digest check:\n${err.message}\n${nodesLog}`)
      const w = await where(victim.id)
      assert.equal(w.status, 200, `the victim after the refused resume: ${JSON.stringify(w)}`)
      assert.equal(w.state, 'paused', `the victim after the refused resume: ${JSON.stringify(w)}`)
    } finally {
      await undrainNode(A)
      await waitNodeState(A, 'live', 30_000)
      await sleep(2_000)
    }

    // Wherever its row is now, the victim never comes back with the
    // attacker's state: a resume either uses the copy its own node kept
    // (everything it had) or is refused again, and it stays paused.
    try {
      const resumed = await Sandbox.connect(victim.id, { ...via(LB), requestTimeoutMs: 120_000 })
      await assertKept(victim, resumed)
      console.log(`# the victim resumed from its own node's copy on ${(await where(victim.id)).node}`)
    } catch (e) {
      if (e instanceof assert.AssertionError) throw e
      assert.match(e.message, /digest/i, `a second resume of the victim: ${e.message}`)
      const again = await where(victim.id)
      assert.equal(again.state, 'paused', `the victim after a second refused resume: ${JSON.stringify(again)}`)
      console.log(`# a second resume (row on ${again.node}) refused too: ${e.message}`)
    }
    const r = await api(LB, 'GET', `/sandboxes/${attacker.id}`)
    assert.equal(r.status, 200)
  })
})
