// Read-only volume mounts (issue 27): E2B's volumeMounts has no read-only
// flag (spec §9.4), so Airlock adds one on the REST body:
// `volumeMounts: [{name, path, readOnly: true}]`. The sandbox sees the volume
// read-only (every write gives EROFS, for root too), the volume is unchanged,
// and another sandbox that mounts it read-write still writes, which the
// read-only one sees. The official SDK then drives the sandbox unmodified.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'

process.env.E2B_VOLUME_API_URL ??= process.env.E2B_API_URL

const { Sandbox, Volume } = await import('e2b')
const { tracker, uniq, sh, TEST_TIMEOUT } = await import('./helpers.mjs')

const t = tracker('volumes-ro')
const made = []
const raw = []
after(async () => {
  await t.killAll()
  await Promise.allSettled(raw.map((id) => Sandbox.kill(id)))
  await Promise.allSettled(made.map((id) => Volume.destroy(id)))
})

/** POST /v2/sandboxes with raw volumeMounts (the SDK cannot send readOnly). */
async function createRaw (volumeMounts) {
  const res = await fetch(`${process.env.E2B_API_URL}/v2/sandboxes`, {
    method: 'POST',
    headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
    body: JSON.stringify({ templateID: 'base', timeout: 300, metadata: t.metadata, volumeMounts })
  })
  assert.equal(res.status, 201, await res.clone().text())
  const body = await res.json()
  raw.push(body.sandboxID)
  return Sandbox.connect(body.sandboxID)
}

describe('volumes: read-only mounts (Airlock extension)', () => {
  it('writes give EROFS, the volume is unchanged, a read-write sandbox still writes', { timeout: TEST_TIMEOUT }, async () => {
    const v = await Volume.create(`ro-${uniq()}`)
    made.push(v.volumeId)
    await v.writeFile('/keep.txt', 'original')
    await v.makeDir('/dir')

    const ro = await createRaw([{ name: v.name, path: '/mnt/ro', readOnly: true }, { name: v.name, path: '/mnt/also-rw' }])
    const rw = await t.create({ volumeMounts: { '/mnt/rw': v } })

    assert.equal((await ro.commands.run('cat /mnt/ro/keep.txt')).stdout, 'original')
    for (const cmd of ['echo x > /mnt/ro/keep.txt', 'touch /mnt/ro/new', 'rm /mnt/ro/keep.txt', 'mkdir /mnt/ro/d2', 'rmdir /mnt/ro/dir', 'mv /mnt/ro/keep.txt /mnt/ro/moved']) {
      for (const user of ['user', 'root']) {
        const r = await sh(ro, cmd, { user })
        assert.notEqual(r.exitCode, 0, `${cmd} as ${user} succeeded on a read-only mount`)
        assert.match(r.stderr, /Read-only file system/, `${cmd} as ${user}: ${r.stderr}`)
      }
    }
    // The same volume mounted read-write in the same sandbox takes writes.
    await ro.commands.run('echo -n also > /mnt/also-rw/also.txt')
    assert.equal(await v.readFile('/also.txt'), 'also')

    assert.equal(await v.readFile('/keep.txt'), 'original')
    assert.equal(await v.exists('/new'), false)
    assert.equal(await v.exists('/dir'), true)

    await rw.commands.run('echo -n from-rw > /mnt/rw/keep.txt')
    assert.equal(await v.readFile('/keep.txt'), 'from-rw')
    assert.equal((await ro.commands.run('cat /mnt/ro/keep.txt')).stdout, 'from-rw', 'the read-only mount sees the other sandbox\'s write at once')

    // readOnly is echoed (only when true) in the detail and the list.
    const want = [{ name: v.name, path: '/mnt/ro', readOnly: true }, { name: v.name, path: '/mnt/also-rw' }]
    const detail = await (await fetch(`${process.env.E2B_API_URL}/sandboxes/${ro.sandboxId}`, { headers: { 'X-API-Key': process.env.E2B_API_KEY } })).json()
    assert.deepEqual(detail.volumeMounts, want)
    assert.deepEqual((await Sandbox.getInfo(rw.sandboxId)).volumeMounts, [{ name: v.name, path: '/mnt/rw' }])
  })

  it('a read-only mount survives pause and resume', { timeout: TEST_TIMEOUT }, async () => {
    const v = await Volume.create(`ro-${uniq()}`)
    made.push(v.volumeId)
    await v.writeFile('/f.txt', 'kept')
    const ro = await createRaw([{ name: v.name, path: '/data', readOnly: true }])
    await ro.pause()
    const back = await Sandbox.connect(ro.sandboxId)
    assert.equal((await back.commands.run('cat /data/f.txt')).stdout, 'kept')
    const r = await sh(back, 'echo x > /data/f.txt', { user: 'root' })
    assert.notEqual(r.exitCode, 0)
    assert.match(r.stderr, /Read-only file system/)
    assert.equal(await v.readFile('/f.txt'), 'kept')
  })
})
