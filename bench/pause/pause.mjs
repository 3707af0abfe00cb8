// One binary's row of bench/pause/run.sh: PAUSE_N rounds, each on the next
// node A of the cluster (run-cluster.sh; its env from AIRLOCK_CLUSTER_STATE):
// two code-interpreter sandboxes created on A, each having run a cell
// (x = 41); A drained with ?move=false (no placement, nothing moved); then
//   - S1: paused (SDK betaPause, timed), left until its image is in the
//     artifact store (asked from its node as the api tier does; a binary
//     without background uploads has it when the pause answers), then
//     connected to through the api tier, which resumes it on another node
//     (timed: "resume on another node");
//   - S2: paused (timed), then connected to at once ("pause→resume elsewhere
//     at once": the resume waits for the upload or is the whole synchronous
//     pause before it).
// Each resumed sandbox must answer x + 1 = 42 on a node other than A.
// Before the drain, S1 is paused and resumed on A once ("same-node resume":
// the single-host baseline of the same round).
// Prints one markdown row.
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'
import { readFileSync } from 'node:fs'
import assert from 'node:assert/strict'
import {
  LB, NODE_IDS, via, sleep, createOn, drainNode, undrainNode, waitNodeState, where, nodeURL, nodeFetch, clusterSecret
} from '../../test/cluster/helpers.mjs'

const req = createRequire(new URL('../../test/cluster/package.json', import.meta.url))
const { Sandbox } = await import(pathToFileURL(req.resolve('@e2b/code-interpreter')).href)

const N = Number(process.env.PAUSE_N || 10)
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]
}

async function interp (node) {
  const s = await createOn(node, 'code-interpreter-v1', { bench: 'pause' }, 600)
  const sbx = await Sandbox.connect(s.id, via(LB))
  const r = await sbx.runCode('x = 41\nx', { timeoutMs: 120_000 })
  assert.equal(r.text, '41', JSON.stringify(r.error))
  return sbx
}

/** Waits until node says the upload of id is done (404: a binary whose pause uploads before it answers). */
async function uploaded (node, id) {
  for (let i = 0; i < 240; i++) {
    const r = await nodeFetch(`${nodeURL(node)}/airlock/v1/internal/sandboxes/${id}/uploaded`, {
      method: 'POST',
      headers: { 'X-Airlock-Cluster-Secret': clusterSecret(), 'X-Airlock-Internal': '1', 'Content-Type': 'application/json' },
      body: 'null',
      timeoutMs: 70_000
    })
    if (r.status === 200 || r.status === 404) return
    await sleep(500)
  }
  throw new Error(`the upload of ${id} on ${node} did not finish`)
}

async function check (sbx, from) {
  const r = await sbx.runCode('x + 1', { timeoutMs: 120_000 })
  assert.equal(r.text, '42', `x after the move: ${JSON.stringify(r.error)}`)
  const w = await where(sbx.sandboxId)
  assert.notEqual(w.node, from, `${sbx.sandboxId} was resumed on the node that paused it`)
}

const pauses = []
const resumes = []
const atOnce = []
const localPauses = []
const localResumes = []
for (let i = 0; i < N; i++) {
  const A = NODE_IDS[i % NODE_IDS.length]
  const s1 = await interp(A)
  const s2 = await interp(A)
  try {
    // The same-node baseline: S1 paused and resumed on A (not draining yet).
    let t0 = Date.now()
    assert.equal(await s1.betaPause({ requestTimeoutMs: 120_000 }), true)
    localPauses.push(Date.now() - t0)
    await uploaded(A, s1.sandboxId) // as for the move below: nothing else running on A
    await sleep(1_000)
    t0 = Date.now()
    const r0 = await Sandbox.connect(s1.sandboxId, { ...via(LB), requestTimeoutMs: 120_000 })
    localResumes.push(Date.now() - t0)
    const r = await r0.runCode('x + 1', { timeoutMs: 120_000 })
    assert.equal(r.text, '42', `x after the same-node resume: ${JSON.stringify(r.error)}`)
    assert.equal((await where(s1.sandboxId)).node, A, `${s1.sandboxId} was not resumed on its node`)

    const d = await drainNode(A, { move: false })
    assert.equal(d.status, 200, `drain ${A}: ${d.status} ${d.text}`)
    await waitNodeState(A, 'draining', 10_000)
    await sleep(2_000) // each api instance rereads the nodes every second

    let t = Date.now()
    assert.equal(await s1.betaPause({ requestTimeoutMs: 120_000 }), true)
    pauses.push(Date.now() - t)
    await uploaded(A, s1.sandboxId)
    await sleep(1_000)
    t = Date.now()
    const r1 = await Sandbox.connect(s1.sandboxId, { ...via(LB), requestTimeoutMs: 120_000 })
    resumes.push(Date.now() - t)
    await check(r1, A)

    t = Date.now()
    assert.equal(await s2.betaPause({ requestTimeoutMs: 120_000 }), true)
    const t2 = Date.now()
    pauses.push(t2 - t)
    const r2 = await Sandbox.connect(s2.sandboxId, { ...via(LB), requestTimeoutMs: 120_000 })
    atOnce.push(Date.now() - t2)
    await check(r2, A)
  } finally {
    await undrainNode(A)
    await Promise.allSettled([s1, s2].map((s) => Sandbox.kill(s.sandboxId, via(LB))))
  }
  console.error(`# round ${i + 1}/${N} on ${A}: same node: pause ${localPauses.at(-1)} ms, resume ${localResumes.at(-1)} ms; pause ${pauses.slice(-2).join(', ')} ms, resume elsewhere ${resumes.at(-1)} ms, at once ${atOnce.at(-1)} ms`)
}
console.error(`# same-node pause p50 ${pct(localPauses, 50)} ms p99 ${pct(localPauses, 99)} ms; same-node resume p50 ${pct(localResumes, 50)} ms p99 ${pct(localResumes, 99)} ms`)
const load = readFileSync('/proc/loadavg', 'utf8').split(' ')[0]
const label = process.env.PAUSE_LABEL || 'airlock'
console.log(`| ${label} | ${N} | ${pct(pauses, 50)} ms | ${pct(pauses, 99)} ms | ${pct(resumes, 50)} ms | ${pct(resumes, 99)} ms | ${pct(atOnce, 50)} ms | ${pct(atOnce, 99)} ms | ${pct(localResumes, 50)} ms | ${pct(localResumes, 99)} ms | ${load} |`)
