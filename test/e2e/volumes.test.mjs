// E2B volumes (spec §9) through the official SDK's Volume class: the
// control API (create, getInfo, connect, list, destroy), every content
// method, bad input, the size limit (an Airlock extension), and the
// volumeMounts checks of a sandbox create. What a mounted volume looks like
// inside a sandbox (both runtimes, pause/resume, fork, two sandboxes) is in
// the mount tests.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'

// The SDK sends content requests to E2B_VOLUME_API_URL, else to
// https://api.<E2B_DOMAIN>: the daemon prints it next to E2B_API_URL.
process.env.E2B_VOLUME_API_URL ??= process.env.E2B_API_URL

const { Sandbox, Volume, VolumeError, VolumeNotFoundError, VolumePathNotFoundError, AuthenticationError, SandboxError } = await import('e2b')
const { tracker, uniq, TEST_TIMEOUT } = await import('./helpers.mjs')

const t = tracker('volumes')
const made = []
after(async () => {
  await t.killAll()
  await Promise.allSettled(made.map((id) => Volume.destroy(id)))
})

async function newVolume (prefix = 'vol') {
  const v = await Volume.create(`${prefix}-${uniq()}`)
  made.push(v.volumeId)
  return v
}

/** POST /volumes with Airlock's sizeMB (the SDK has no such option). */
async function createSized (name, sizeMB) {
  const res = await fetch(`${process.env.E2B_API_URL}/volumes`, {
    method: 'POST',
    headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
    body: JSON.stringify({ name, sizeMB })
  })
  assert.equal(res.status, 201, await res.clone().text())
  const body = await res.json()
  made.push(body.volumeID)
  return body
}

const streamOf = (...chunks) => new ReadableStream({
  start (c) {
    for (const x of chunks) c.enqueue(new TextEncoder().encode(x))
    c.close()
  }
})

async function drain (stream) {
  const parts = []
  for await (const chunk of stream) parts.push(Buffer.from(chunk))
  return Buffer.concat(parts)
}

describe('volumes: control API', () => {
  it('create, getInfo, connect, list, destroy', { timeout: TEST_TIMEOUT }, async () => {
    const name = `ctl-${uniq()}`
    const v = await Volume.create(name)
    made.push(v.volumeId)
    assert.match(v.volumeId, /^[0-9a-f-]{36}$/)
    assert.equal(v.name, name)
    assert.ok(v.token.length > 20)

    const info = await Volume.getInfo(v.volumeId)
    assert.equal(info.volumeId, v.volumeId)
    assert.equal(info.name, name)
    assert.ok(info.token)
    assert.equal(info.domain, undefined)

    const c = await Volume.connect(v.volumeId)
    assert.equal(c.name, name)
    await v.writeFile('/hello.txt', 'from the creator')
    assert.equal(await c.readFile('/hello.txt'), 'from the creator', 'a connected handle reads what the first wrote')

    const listed = await Volume.list()
    assert.deepEqual(listed.find((x) => x.volumeId === v.volumeId), { volumeId: v.volumeId, name })

    await assert.rejects(Volume.create(name), (err) => err instanceof VolumeError && /400: Volume with name '.*' already exists/.test(err.message))
    await assert.rejects(Volume.create('no spaces allowed'), (err) => err instanceof VolumeError && /400: Invalid volume name/.test(err.message))

    assert.equal(await Volume.destroy(v.volumeId), true)
    assert.equal(await Volume.destroy(v.volumeId), false, 'a second destroy is "not found"')
    await assert.rejects(Volume.getInfo(v.volumeId), VolumeNotFoundError)
    await assert.rejects(Volume.connect(v.volumeId), VolumeNotFoundError)
    assert.equal((await Volume.list()).some((x) => x.volumeId === v.volumeId), false)
    // The old handle's token names a volume that is gone.
    await assert.rejects(c.readFile('/hello.txt'), VolumePathNotFoundError)
    // The name is free again.
    const again = await Volume.create(name)
    made.push(again.volumeId)
    assert.notEqual(again.volumeId, v.volumeId)
    assert.deepEqual(await again.list('/'), [], 'a new volume of an old name starts empty')
  })
})

describe('volumes: content API', () => {
  it('writeFile and readFile in every format', { timeout: TEST_TIMEOUT }, async () => {
    const v = await newVolume()
    const bin = new Uint8Array(256).map((_, i) => i)
    const e = await v.writeFile('/text.txt', 'héllo wörld')
    assert.equal(e.type, 'file')
    assert.equal(e.name, 'text.txt')
    assert.equal(e.path, '/text.txt')
    assert.equal(e.size, Buffer.byteLength('héllo wörld'))
    assert.ok(e.mtime instanceof Date && !isNaN(e.mtime))
    await v.writeFile('/bin.dat', bin.buffer)
    await v.writeFile('/blob.txt', new Blob(['from a blob']))
    await v.writeFile('/stream.txt', streamOf('chunk 1, ', 'chunk 2'))
    await v.writeFile('/empty.txt', '')

    assert.equal(await v.readFile('/text.txt'), 'héllo wörld')
    assert.deepEqual(await v.readFile('/bin.dat', { format: 'bytes' }), bin)
    assert.equal(await (await v.readFile('/blob.txt', { format: 'blob' })).text(), 'from a blob')
    assert.equal((await drain(await v.readFile('/stream.txt', { format: 'stream' }))).toString(), 'chunk 1, chunk 2')
    assert.equal(await v.readFile('/empty.txt'), '')
    assert.deepEqual(await v.readFile('/empty.txt', { format: 'bytes' }), new Uint8Array())

    // A streamed upload of 8 MiB comes back byte for byte.
    const big = Buffer.alloc(8 << 20, 'abcdefgh')
    const chunks = []
    for (let i = 0; i < big.length; i += 1 << 20) chunks.push(big.subarray(i, i + (1 << 20)))
    await v.writeFile('/big.bin', new ReadableStream({ start (c) { for (const x of chunks) c.enqueue(x); c.close() } }))
    const back = await drain(await v.readFile('/big.bin', { format: 'stream' }))
    assert.equal(back.length, big.length)
    assert.ok(back.equals(big))
  })

  it('overwrite needs force; uid, gid and mode round-trip; parents with force', { timeout: TEST_TIMEOUT }, async () => {
    const v = await newVolume()
    await v.writeFile('/f.txt', 'one')
    await assert.rejects(v.writeFile('/f.txt', 'two', { force: false }), (err) => err instanceof VolumeError && /^409: /.test(err.message))
    assert.equal(await v.readFile('/f.txt'), 'one')
    await v.writeFile('/f.txt', 'two', { force: true })
    assert.equal(await v.readFile('/f.txt'), 'two')

    const e = await v.writeFile('/owned.txt', 'x', { uid: 1234, gid: 5678, mode: 0o640 })
    assert.equal(e.uid, 1234)
    assert.equal(e.gid, 5678)
    assert.equal(e.mode, 0o640)
    const d = await v.writeFile('/default.txt', 'x')
    assert.equal(d.uid, 1000, 'default owner: the sandboxes\' user')
    assert.equal(d.mode, 0o666)

    await assert.rejects(v.writeFile('/a/b/c.txt', 'deep'), VolumePathNotFoundError)
    await v.writeFile('/a/b/c.txt', 'deep', { force: true })
    assert.equal(await v.readFile('/a/b/c.txt'), 'deep')
    await assert.rejects(v.writeFile('/a', 'over a dir', { force: true }), (err) => err instanceof VolumeError && /^409: /.test(err.message))
  })

  it('makeDir, list, getInfo, exists, updateMetadata, remove', { timeout: TEST_TIMEOUT }, async () => {
    const v = await newVolume()
    const dir = await v.makeDir('/d')
    assert.equal(dir.type, 'directory')
    assert.equal(dir.mode, 0o777)
    await assert.rejects(v.makeDir('/d'), (err) => err instanceof VolumeError && /^409: /.test(err.message))
    assert.equal((await v.makeDir('/d', { force: true })).type, 'directory', 'an existing dir with force is fine')
    await assert.rejects(v.makeDir('/x/y'), VolumePathNotFoundError)
    const nested = await v.makeDir('/x/y/z', { force: true, mode: 0o750 })
    assert.equal(nested.path, '/x/y/z')
    assert.equal(nested.mode, 0o750)
    await v.writeFile('/d/one.txt', '1')
    await v.writeFile('/d/two.txt', '22')

    const top = await v.list('/')
    assert.deepEqual(top.map((x) => [x.path, x.type]), [['/d', 'directory'], ['/x', 'directory']])
    const deep = await v.list('/', { depth: 3 })
    assert.deepEqual(deep.map((x) => x.path), ['/d', '/d/one.txt', '/d/two.txt', '/x', '/x/y', '/x/y/z'])
    const inD = await v.list('/d')
    assert.deepEqual(inD.map((x) => [x.name, x.size]), [['one.txt', 1], ['two.txt', 2]])
    await assert.rejects(v.list('/missing'), VolumePathNotFoundError)

    const st = await v.getInfo('/d/two.txt')
    assert.equal(st.type, 'file')
    assert.equal(st.size, 2)
    assert.ok(st.atime instanceof Date && st.ctime instanceof Date)
    assert.equal((await v.getInfo('/d')).type, 'directory')
    assert.equal(await v.exists('/d/one.txt'), true)
    assert.equal(await v.exists('/d/none.txt'), false)
    await assert.rejects(v.getInfo('/nope'), VolumePathNotFoundError)

    const upd = await v.updateMetadata('/d/one.txt', { uid: 4242, gid: 4343, mode: 0o600 })
    assert.deepEqual([upd.uid, upd.gid, upd.mode], [4242, 4343, 0o600])
    assert.equal((await v.getInfo('/d/one.txt')).mode, 0o600)
    await assert.rejects(v.updateMetadata('/nope', { mode: 0o644 }), VolumePathNotFoundError)

    await v.remove('/d/one.txt')
    assert.equal(await v.exists('/d/one.txt'), false)
    await v.remove('/x') // a directory, recursively
    assert.equal(await v.exists('/x/y/z'), false)
    await assert.rejects(v.remove('/x'), VolumePathNotFoundError)
    assert.deepEqual((await v.list('/')).map((x) => x.path), ['/d'])
  })

  it('paths cannot leave the volume; a token opens only its own volume', { timeout: TEST_TIMEOUT }, async () => {
    const v = await newVolume()
    const w = await newVolume()
    await w.writeFile('/other.txt', 'not yours')
    for (const p of ['/../../../etc/passwd', '../x', '/a/../../b']) {
      await assert.rejects(v.readFile(p), (err) => err instanceof VolumeError && !(err instanceof VolumePathNotFoundError) && /^400: /.test(err.message), p)
      await assert.rejects(v.writeFile(p, 'x', { force: true }), (err) => /^400: /.test(err.message), p)
    }
    assert.equal(await v.readFile('/etc/passwd').catch((e) => e.constructor.name), 'VolumePathNotFoundError', '/etc/passwd is the volume\'s, and missing')
    // w's id with v's token.
    const borrowed = new Volume(w.volumeId, w.name, v.token)
    await assert.rejects(borrowed.readFile('/other.txt'), AuthenticationError)
    const forged = new Volume(v.volumeId, v.name, v.token.slice(0, -4) + 'AAAA')
    await assert.rejects(forged.list('/'), AuthenticationError)
  })

  it('a write past the size limit is refused and leaves nothing behind', { timeout: TEST_TIMEOUT }, async () => {
    const body = await createSized(`small-${uniq()}`, 16) // the smallest
    assert.equal(body.sizeMB, 16)
    const v = await Volume.connect(body.volumeID)
    await v.writeFile('/keep.txt', 'kept')
    const tooBig = new Uint8Array(17 << 20)
    await assert.rejects(v.writeFile('/big.bin', tooBig.buffer), (err) => err instanceof VolumeError && /^507: /.test(err.message))
    await assert.rejects(v.writeFile('/big.bin', streamOf('x'.repeat(9 << 20), 'y'.repeat(9 << 20))), (err) => /^507: /.test(err.message))
    await assert.rejects(v.writeFile('/keep.txt', tooBig.buffer, { force: true }), (err) => /^507: /.test(err.message))
    assert.deepEqual((await v.list('/')).map((x) => x.name), ['keep.txt'], 'no partial file, no temporary file')
    assert.equal(await v.readFile('/keep.txt'), 'kept')
    await v.writeFile('/half.bin', new Uint8Array(8 << 20).buffer)
    await assert.rejects(fetch(`${process.env.E2B_API_URL}/volumes`, {
      method: 'POST',
      headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
      body: JSON.stringify({ name: `tiny-${uniq()}`, sizeMB: 1 })
    }).then(async (r) => { if (r.status !== 400) throw new Error(`status ${r.status}`); throw new Error(await r.text()) }), /sizeMB must be between 16 and/)
  })
})

describe('volumes: volumeMounts on create', () => {
  it('bad mounts answer 400 with E2B\'s reasons', { timeout: TEST_TIMEOUT }, async () => {
    const v = await newVolume('mnt')
    const cases = [
      [{ 'relative/path': v }, 'volume mount #0: path must be absolute'],
      [{ '/mnt/../etc': v }, 'volume mount #0: path must not contain any \'.\' or \'..\' components'],
      [{ '/mnt/data': 'no-such-volume-' + uniq() }, /volume mount #0: volume 'no-such-volume-[0-9a-f]+' not found/],
      [{ '/': v }, 'volume mount #0: path \'/\' would hide the sandbox\'s root filesystem'],
      [{ '/proc': v }, 'would hide /proc'],
      [{ '/dev': v }, 'would hide /dev'],
      [{ '/ok': v, '/proc/x': v.name }, 'invalid mounts:\n\t- volume mount #1: path \'/proc/x\' would hide /proc']
    ]
    for (const [volumeMounts, want] of cases) {
      await assert.rejects(t.create({ volumeMounts }), (err) => {
        assert.ok(err instanceof SandboxError, String(err))
        assert.match(err.message, /^400: invalid mounts:/)
        if (typeof want === 'string') assert.ok(err.message.includes(want), `${err.message} lacks ${want}`)
        else assert.match(err.message, want)
        return true
      })
    }
    // A repeated path (the SDK's object keys cannot repeat one): raw body.
    const res = await fetch(`${process.env.E2B_API_URL}/v2/sandboxes`, {
      method: 'POST',
      headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
      body: JSON.stringify({ templateID: 'base', volumeMounts: [{ name: v.name, path: '/a' }, { name: v.name, path: '/a' }] })
    })
    assert.equal(res.status, 400)
    assert.deepEqual(await res.json(), { code: 400, message: 'invalid mounts:\n\t- volume mount #1: path \'/a\' is already used' })
  })

  it('a sandbox lists the volumes it mounts', { timeout: TEST_TIMEOUT }, async () => {
    const v = await newVolume('mnt')
    await v.writeFile('/from-api.txt', 'written through the content API')
    const s = await t.create({ volumeMounts: { '/mnt/data': v, '/home/user/shared': v.name } })
    const want = [{ name: v.name, path: '/mnt/data' }, { name: v.name, path: '/home/user/shared' }]
    assert.deepEqual((await Sandbox.getInfo(s.sandboxId)).volumeMounts, want)
    const listed = await Sandbox.list({ query: { metadata: t.metadata } }).nextItems()
    assert.deepEqual(listed.find((x) => x.sandboxId === s.sandboxId)?.volumeMounts, want)
    // The two halves meet: the content API and the sandbox see one tree.
    assert.equal((await s.commands.run('cat /home/user/shared/from-api.txt')).stdout, 'written through the content API')
    await s.commands.run('echo -n from the sandbox > /mnt/data/from-sandbox.txt')
    assert.equal(await v.readFile('/from-sandbox.txt'), 'from the sandbox')
    // Deleting a mounted volume is allowed (as in E2B): the record and the
    // data go; the sandbox lives on.
    assert.equal(await Volume.destroy(v.volumeId), true)
    assert.equal((await s.commands.run('echo alive')).stdout, 'alive\n')
  })
})
