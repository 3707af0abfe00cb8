// Volumes in the cluster (issue 27), with the official SDK through the api
// tier (haproxy): the nodes share one volume root (run-cluster.sh
// --volume-root; in CI one host directory given to every node, as this VM
// cannot run an NFS server), so a volume is usable from every node at once.
// - a volume made through the api tier (the row in PostgreSQL, its name
//   unique cluster-wide, whichever api instance is asked);
// - a sandbox on node A and one on node B mount it at the same time: what
//   one writes the other reads at once, both ways;
// - the content API through the api tier with the SDK's Volume (its file
//   calls carry only the volume's token, no API key): upload, list, read,
//   stat, remove, through either api instance;
// - the sandbox on A, paused, resumes on B (A and C drained ?move=false)
//   with the same volume, not a copy; a drain moves a running sandbox with
//   its volume;
// - destroy while sandboxes on two nodes mount it (E2B allows it): gone for
//   every node and api instance, the mounts empty, the sandboxes running.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync } from 'node:fs'
import {
  LB, API1, API2, NODE_IDS, ARTIFACTS, api, tracker, via, uniq, sleep, waitUntil, logGrep,
  nodeURL, nodeFetch, asAPITier, drainNode, waitNodeState, restoreNodes, waitUploaded, where, TEST_TIMEOUT
} from './helpers.mjs'

// The SDK sends content calls to E2B_VOLUME_API_URL (run-cluster.sh's env
// file sets it to haproxy).
process.env.E2B_VOLUME_API_URL ??= LB
const { Sandbox, Volume, VolumeNotFoundError } = await import('e2b')

const ROOT = process.env.AIRLOCK_CLUSTER_VOLUME_ROOT || ''
const t = tracker('volumes')
const made = []
after(async () => {
  await t.killAll()
  await Promise.allSettled(made.map((id) => Volume.destroy(id, via(LB))))
  await restoreNodes()
})

const [A, B, C] = NODE_IDS

/** A sandbox with vol mounted at path, created on node (as the api tier forwards a placed create). */
async function createWithVolume (node, vol, path) {
  const res = await nodeFetch(`${nodeURL(node)}/v2/sandboxes`, {
    method: 'POST',
    headers: { ...asAPITier(), 'Content-Type': 'application/json' },
    body: JSON.stringify({ templateID: 'base', timeout: 300, metadata: t.metadata, volumeMounts: [{ name: vol.name, path }] }),
    timeoutMs: 120_000
  })
  const text = await res.text()
  assert.equal(res.status, 201, `create with volume ${vol.name} on ${node}: ${res.status} ${text}\n${logGrep(node, 'volume')}`)
  const id = t.add(JSON.parse(text).sandboxID)
  const sbx = await Sandbox.connect(id, via(LB))
  assert.equal((await where(id)).node, node)
  return sbx
}

async function run (sbx, cmd) {
  const r = await sbx.commands.run(cmd, { requestTimeoutMs: 120_000 })
  return r.stdout
}

describe('volumes across nodes', { skip: !ROOT && 'the cluster has no shared volume root (run-cluster.sh --volume-root)', timeout: TEST_TIMEOUT * 6 }, () => {
  let vol
  let onA
  let onB
  before(async () => {
    await restoreNodes()
  })

  it('a volume made through one api instance is known to the other; its name is unique cluster-wide', { timeout: TEST_TIMEOUT }, async () => {
    const name = `cv-${uniq()}`
    vol = await Volume.create(name, via(API1))
    made.push(vol.volumeId)
    const info = await Volume.getInfo(vol.volumeId, via(API2))
    assert.equal(info.name, name)
    assert.ok((await Volume.list(via(LB))).some((v) => v.volumeId === vol.volumeId))
    const dup = await api(API2, 'POST', '/volumes', { name })
    assert.equal(dup.status, 400, `a second ${name} through the other api instance: ${dup.status} ${dup.text}`)
    assert.match(dup.text, /already exists/)
    // Its data is a directory under the shared root, not on one node's disk.
    assert.ok(existsSync(`${ROOT}/${vol.volumeId}/data`), `${ROOT}/${vol.volumeId}/data is missing`)
  })

  it('sandboxes on two nodes mount it at once and see each other\'s writes at once', { timeout: TEST_TIMEOUT }, async () => {
    ;[onA, onB] = await Promise.all([createWithVolume(A, vol, '/mnt/shared'), createWithVolume(B, vol, '/mnt/shared')])
    // The api tier merges what each node says mounts it (mountedBy names a node's own sandboxes).
    for (const path of [`/volumes/${vol.volumeId}`, '/volumes']) {
      const r = await api(LB, 'GET', path)
      assert.equal(r.status, 200, r.text)
      const v = Array.isArray(r.body) ? r.body.find((x) => x.volumeID === vol.volumeId) : r.body
      assert.deepEqual(v?.mountedBy, [onA.sandboxId, onB.sandboxId].sort(), `GET ${path}: ${r.text}`)
    }
    for (let i = 0; i < 3; i++) {
      const fromA = `from ${A} ${uniq()}`
      await run(onA, `echo '${fromA}' > /mnt/shared/a.txt`)
      assert.equal((await run(onB, 'cat /mnt/shared/a.txt')).trim(), fromA, `${B} reads what ${A} wrote`)
      const fromB = `from ${B} ${uniq()}`
      await run(onB, `mkdir -p /mnt/shared/dir && echo '${fromB}' > /mnt/shared/dir/b.txt`)
      assert.equal((await run(onA, 'cat /mnt/shared/dir/b.txt')).trim(), fromB, `${A} reads what ${B} wrote`)
    }
    // A file being appended to on one node, read on the other at the same time.
    await run(onA, 'for i in $(seq 1 20); do echo line$i >> /mnt/shared/log.txt; sleep 0.05; done')
    assert.equal((await run(onB, 'wc -l < /mnt/shared/log.txt')).trim(), '20')
  })

  it('the content API through the api tier, with the volume\'s token only (the SDK\'s Volume)', { timeout: TEST_TIMEOUT }, async () => {
    // The SDK's file calls send Authorization: Bearer <token>, no API key.
    const c = await Volume.connect(vol.volumeId, via(LB))
    const text = `uploaded through the api tier ${uniq()}`
    await c.makeDir('/up')
    await c.writeFile('/up/hello.txt', text)
    assert.equal((await run(onA, 'cat /mnt/shared/up/hello.txt')), text, `the sandbox on ${A} sees the upload`)
    assert.equal((await run(onB, 'cat /mnt/shared/up/hello.txt')), text, `the sandbox on ${B} sees the upload`)
    assert.equal(await c.readFile('/a.txt', { format: 'text' }).then((s) => s.trim().startsWith(`from ${A}`)), true)
    const names = (await c.list('/')).map((e) => e.name).sort()
    for (const want of ['a.txt', 'dir', 'log.txt', 'up']) assert.ok(names.includes(want), `list / = ${names}`)
    assert.equal((await c.getInfo('/up/hello.txt')).size, text.length)
    // Both api instances answer token-only calls (the token's key is the cluster's).
    for (const base of [API1, API2]) {
      const res = await fetch(`${base}/volumecontent/${vol.volumeId}/file?path=/up/hello.txt`, { headers: { Authorization: `Bearer ${c.token}` } })
      assert.equal(res.status, 200, `token-only read through ${base}`)
      assert.equal(await res.text(), text)
      const bad = await fetch(`${base}/volumecontent/${vol.volumeId}/file?path=/up/hello.txt`, { headers: { Authorization: 'Bearer x.y.z' } })
      assert.equal(bad.status, 401, `a bad token through ${base}`)
    }
    await c.remove('/up/hello.txt')
    assert.equal((await run(onB, 'ls /mnt/shared/up')).trim(), '', `the removal shows on ${B}`)
  })

  it(`a sandbox paused on ${A} resumes on ${B} with the same volume; a drain moves one with its volume`, { timeout: TEST_TIMEOUT * 3, skip: !ARTIFACTS && 'moves need the artifact store (run-cluster.sh --artifacts)' }, async () => {
    const id = onA.sandboxId
    assert.equal(await onA.betaPause({ requestTimeoutMs: 120_000 }), true)
    await waitUploaded(A, id)
    // Written while it is paused: the resumed sandbox must see it (the same
    // volume, not a copy taken at the pause).
    const c = await Volume.connect(vol.volumeId, via(LB))
    const whilePaused = `written while ${id} was paused ${uniq()}`
    await c.writeFile('/paused.txt', whilePaused)
    for (const n of [A, C]) {
      const d = await drainNode(n, { move: false })
      assert.equal(d.status, 200, `drain ${n}?move=false: ${d.status} ${d.text}`)
      await waitNodeState(n, 'draining', 10_000)
    }
    await sleep(2_000) // each api instance's placement rereads the nodes every second
    const resumed = await Sandbox.connect(id, { ...via(LB), requestTimeoutMs: 120_000 })
    const w = await where(id)
    assert.equal(w.node, B, `resumed on ${w.node}, want ${B}`)
    assert.equal(w.state, 'running')
    assert.equal((await run(resumed, 'cat /mnt/shared/paused.txt')), whilePaused)
    const after = `written after the move ${uniq()}`
    await run(resumed, `echo '${after}' > /mnt/shared/moved.txt`)
    assert.equal((await run(onB, 'cat /mnt/shared/moved.txt')).trim(), after)
    assert.equal((await c.readFile('/moved.txt', { format: 'text' })).trim(), after)
    const mounts = (await api(LB, 'GET', `/sandboxes/${id}`)).body?.volumeMounts
    assert.deepEqual(mounts, [{ name: vol.name, path: '/mnt/shared' }])

    // A drain of B (A undrained) moves both running sandboxes there to A,
    // with the volume.
    const u = await api(LB, 'POST', `/airlock/v1/nodes/${A}/undrain`)
    assert.equal(u.status, 200, u.text)
    await waitNodeState(A, 'live', 10_000)
    await sleep(2_000)
    const d = await drainNode(B)
    assert.equal(d.status, 200, `drain ${B}: ${d.status} ${d.text}`)
    for (const sid of [id, onB.sandboxId]) {
      const ws = await waitUntil(async () => { const x = await where(sid); return x.state === 'running' && x.node === A && x }, 120_000, 500)
      assert.ok(ws, `${sid} after the drain of ${B}: ${JSON.stringify(await where(sid))}`)
    }
    const movedB = await Sandbox.connect(onB.sandboxId, via(LB))
    const again = `after the drain ${uniq()}`
    await run(movedB, `echo '${again}' > /mnt/shared/drained.txt`)
    assert.equal((await run(resumed, 'cat /mnt/shared/drained.txt')).trim(), again)
    assert.equal((await c.readFile('/drained.txt', { format: 'text' })).trim(), again)
  })

  it('destroy while sandboxes on two nodes mount it: the volume is gone for every api instance and node, the sandboxes go on; a create that mounts it is refused', { timeout: TEST_TIMEOUT }, async () => {
    await restoreNodes()
    await t.killAll()
    const [x, y] = await Promise.all([createWithVolume(A, vol, '/mnt/v'), createWithVolume(B, vol, '/mnt/v')])
    await run(x, 'echo before > /mnt/v/before.txt')
    assert.equal((await run(y, 'cat /mnt/v/before.txt')).trim(), 'before')
    assert.equal(await Volume.destroy(vol.volumeId, via(API2)), true)
    // E2B allows it: the data goes; each sandbox sees its mount empty (or
    // gone) and keeps running; nothing it writes there reaches another.
    for (const [sbx, node] of [[x, A], [y, B]]) {
      const r = await sbx.commands.run('ls -A /mnt/v 2>&1; echo after > /mnt/v/after.txt 2>&1; echo rc=$?', { requestTimeoutMs: 60_000 }).catch((err) => err)
      const out = r.stdout ?? ''
      console.log(`# ${node} after the destroy: ${JSON.stringify(out)}`)
      assert.doesNotMatch(out, /before\.txt/, `the sandbox on ${node} still sees the deleted volume's file`)
      assert.equal((await run(sbx, 'echo alive')).trim(), 'alive', `the sandbox on ${node} after the destroy`)
    }
    assert.doesNotMatch(await run(y, 'ls -A /mnt/v 2>&1 || true'), /after\.txt/, `a write on ${A} after the destroy reached ${B}`)
    await assert.rejects(Volume.getInfo(vol.volumeId, via(API1)), VolumeNotFoundError)
    assert.equal((await Volume.list(via(LB))).some((v) => v.volumeId === vol.volumeId), false)
    assert.ok(!existsSync(`${ROOT}/${vol.volumeId}`), 'its directory is gone from the shared root')
    const r = await api(LB, 'POST', '/v2/sandboxes', { templateID: 'base', volumeMounts: [{ name: vol.name, path: '/mnt/v' }] })
    assert.equal(r.status, 400, `${r.status} ${r.text}`)
    assert.match(r.text, /not found/)
  })
})
