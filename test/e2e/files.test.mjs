// Filesystem through the official E2B SDK: /files REST and the Filesystem RPCs.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { FileNotFoundError, NotFoundError, FileType } from 'e2b'
import { tracker, uniq, waitUntil, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('files')
let sbx
before(async () => { sbx = await t.create() }, { timeout: TEST_TIMEOUT })
after(() => t.killAll())

const sha256 = (buf) => createHash('sha256').update(buf).digest('hex')

describe('files', { timeout: TEST_TIMEOUT * 6 }, () => {
  it('write and read text', { timeout: TEST_TIMEOUT }, async () => {
    const info = await sbx.files.write('/home/user/a.txt', 'héllo\nwörld')
    assert.equal(info.path, '/home/user/a.txt')
    assert.equal(info.name, 'a.txt')
    assert.equal(await sbx.files.read('/home/user/a.txt'), 'héllo\nwörld')
    // Relative paths resolve against the user's home.
    await sbx.files.write('rel/b.txt', 'relative')
    assert.equal(await sbx.files.read('/home/user/rel/b.txt'), 'relative')
    const r = await sbx.commands.run('cat ~/rel/b.txt')
    assert.equal(r.stdout, 'relative')
    // Empty file.
    await sbx.files.write('empty.txt', '')
    assert.equal(await sbx.files.read('empty.txt'), '')
  })

  it('write bytes as Uint8Array, ArrayBuffer, Blob and stream; read as bytes and blob', { timeout: TEST_TIMEOUT }, async () => {
    const data = new Uint8Array(randomBytes(70_000))
    await sbx.files.write('bin/u8.bin', data)
    await sbx.files.write('bin/ab.bin', data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength))
    await sbx.files.write('bin/blob.bin', new Blob([data]))
    await sbx.files.write('bin/stream.bin', new Blob([data]).stream())
    await sbx.files.write('bin/gzip.bin', data, { gzip: true })
    for (const name of ['u8', 'ab', 'blob', 'stream', 'gzip']) {
      const got = await sbx.files.read(`bin/${name}.bin`, { format: 'bytes' })
      assert.ok(got instanceof Uint8Array)
      assert.equal(sha256(got), sha256(data), `${name} round trip`)
    }
    const blob = await sbx.files.read('bin/u8.bin', { format: 'blob' })
    assert.equal(blob.size, data.length)
    const gz = await sbx.files.read('bin/u8.bin', { format: 'bytes', gzip: true })
    assert.equal(sha256(gz), sha256(data), 'gzip download')
    const r = await sbx.commands.run('sha256sum ~/bin/u8.bin')
    assert.equal(r.stdout.split(' ')[0], sha256(data))
  })

  it('write multiple files in one call', { timeout: TEST_TIMEOUT }, async () => {
    const dir = `/home/user/multi-${uniq()}`
    const infos = await sbx.files.write([
      { path: `${dir}/one.txt`, data: 'one' },
      { path: `${dir}/sub/two.txt`, data: 'two' },
      { path: `${dir}/three.bin`, data: new Uint8Array([0, 1, 2, 255]).buffer }
    ])
    assert.deepEqual(infos.map((i) => i.path).sort(), [`${dir}/one.txt`, `${dir}/sub/two.txt`, `${dir}/three.bin`].sort())
    assert.equal(await sbx.files.read(`${dir}/sub/two.txt`), 'two')
    assert.deepEqual(Array.from(await sbx.files.read(`${dir}/three.bin`, { format: 'bytes' })), [0, 1, 2, 255])
  })

  it('files.write creates missing parents with root rights and gives them to the user', { timeout: TEST_TIMEOUT }, async () => {
    const top = `/${uniq()}` // "/" belongs to root: user cannot mkdir here
    const infos = await sbx.files.write([
      { path: `${top}/a.txt`, data: 'a' },
      { path: `${top}/sub/deep/b.txt`, data: 'b' }
    ])
    assert.deepEqual(infos.map((i) => i.path).sort(), [`${top}/a.txt`, `${top}/sub/deep/b.txt`])
    assert.equal(await sbx.files.read(`${top}/sub/deep/b.txt`), 'b')
    for (const p of [top, `${top}/sub`, `${top}/sub/deep`, `${top}/a.txt`, `${top}/sub/deep/b.txt`]) {
      const info = await sbx.files.getInfo(p)
      assert.equal(info.owner, 'user', `${p} owner`)
      assert.equal(info.group, 'user', `${p} group`)
    }
    assert.equal((await sbx.files.getInfo(top)).mode, 0o755)
    // Directories that already exist keep their owner and mode.
    const tmp = await sbx.files.getInfo('/tmp')
    await sbx.files.write(`/tmp/${uniq()}/c.txt`, 'c')
    const after = await sbx.files.getInfo('/tmp')
    assert.equal(after.owner, tmp.owner)
    assert.equal(after.mode, tmp.mode)
    assert.equal((await sbx.files.getInfo('/')).owner, 'root')
  })

  it('file metadata round trip', { timeout: TEST_TIMEOUT }, async () => {
    await sbx.files.write('meta.txt', 'm', { metadata: { owner: 'e2e', purpose: 'test' } })
    const info = await sbx.files.getInfo('meta.txt')
    assert.deepEqual(info.metadata, { owner: 'e2e', purpose: 'test' })
  })

  it('overwriting a file without metadata clears its metadata (write result and getInfo)', { timeout: TEST_TIMEOUT }, async () => {
    const p = `meta-${uniq()}.txt`
    const first = await sbx.files.write(p, 'v1', { metadata: { owner: 'e2e' } })
    assert.deepEqual(first.metadata, { owner: 'e2e' })
    const second = await sbx.files.write(p, 'v2')
    assert.deepEqual(second.metadata ?? {}, {}, JSON.stringify(second))
    const info = await sbx.files.getInfo(p)
    assert.deepEqual(info.metadata ?? {}, {}, JSON.stringify(info))
    assert.equal(await sbx.files.read(p), 'v2')
    // …and a write with metadata sets exactly the new set.
    const third = await sbx.files.write(p, 'v3', { metadata: { purpose: 'again' } })
    assert.deepEqual(third.metadata, { purpose: 'again' })
    assert.deepEqual((await sbx.files.getInfo(p)).metadata, { purpose: 'again' })
  })

  it('list, getInfo, exists', { timeout: TEST_TIMEOUT }, async () => {
    const dir = `/home/user/ls-${uniq()}`
    await sbx.files.write(`${dir}/f.txt`, '12345')
    await sbx.files.makeDir(`${dir}/d`)
    await sbx.files.write(`${dir}/d/deep.txt`, 'x')
    await sbx.commands.run(`ln -s ${dir}/f.txt ${dir}/link`)

    const entries = await sbx.files.list(dir)
    const byName = Object.fromEntries(entries.map((e) => [e.name, e]))
    assert.deepEqual(Object.keys(byName).sort(), ['d', 'f.txt', 'link'])
    assert.equal(byName['f.txt'].type, FileType.FILE)
    assert.equal(byName['f.txt'].size, 5)
    assert.equal(byName['f.txt'].path, `${dir}/f.txt`)
    assert.equal(byName.d.type, FileType.DIR)
    assert.equal(byName.link.symlinkTarget, `${dir}/f.txt`)

    const deep = await sbx.files.list(dir, { depth: 2 })
    assert.ok(deep.some((e) => e.path === `${dir}/d/deep.txt`), 'depth 2 lists nested files')

    const fi = await sbx.files.getInfo(`${dir}/f.txt`)
    assert.equal(fi.mode, 0o644)
    assert.equal(fi.permissions, '-rw-r--r--')
    assert.equal(fi.owner, 'user')
    assert.equal(fi.group, 'user')
    assert.ok(fi.modifiedTime instanceof Date && Math.abs(fi.modifiedTime - Date.now()) < 120_000)
    const di = await sbx.files.getInfo(`${dir}/d`)
    assert.equal(di.type, FileType.DIR)
    assert.equal(di.mode, 0o755)
    assert.equal(di.permissions, 'drwxr-xr-x')

    assert.equal(await sbx.files.exists(`${dir}/f.txt`), true)
    assert.equal(await sbx.files.exists(`${dir}/nope`), false)
  })

  it('rename, remove, makeDir', { timeout: TEST_TIMEOUT }, async () => {
    const dir = `/home/user/mv-${uniq()}`
    assert.equal(await sbx.files.makeDir(`${dir}/a/b`), true)
    assert.equal(await sbx.files.makeDir(`${dir}/a/b`), false)
    await sbx.files.write(`${dir}/src.txt`, 'moving')
    const moved = await sbx.files.rename(`${dir}/src.txt`, `${dir}/new/dst.txt`)
    assert.equal(moved.path, `${dir}/new/dst.txt`)
    assert.equal(await sbx.files.exists(`${dir}/src.txt`), false)
    assert.equal(await sbx.files.read(`${dir}/new/dst.txt`), 'moving')
    await assert.rejects(sbx.files.rename(`${dir}/missing`, `${dir}/x`), NotFoundError)

    await sbx.files.remove(dir)
    assert.equal(await sbx.files.exists(dir), false)
    await sbx.files.remove(`${dir}/never-existed`) // not an error
  })

  it('missing file: read throws FileNotFoundError', { timeout: TEST_TIMEOUT }, async () => {
    await assert.rejects(sbx.files.read('/home/user/definitely-missing.txt'), (err) => {
      assert.ok(err instanceof FileNotFoundError || err instanceof NotFoundError, `got ${err?.name}: ${err?.message}`)
      return true
    })
    await assert.rejects(sbx.files.getInfo('/home/user/definitely-missing.txt'), NotFoundError)
    await assert.rejects(sbx.files.list('/home/user/definitely-missing'), NotFoundError)
  })

  it('watchDir receives create and write events, then stops', { timeout: TEST_TIMEOUT }, async () => {
    const dir = `/home/user/watch-${uniq()}`
    await sbx.files.makeDir(dir)
    const events = []
    const handle = await sbx.files.watchDir(dir, (e) => { events.push(e) }, { timeoutMs: 60_000 })
    await sbx.files.write(`${dir}/w.txt`, 'first')
    await sbx.commands.run(`echo more >> ${dir}/w.txt`)
    const ok = await waitUntil(() =>
      events.some((e) => e.name === 'w.txt' && e.type === 'create') &&
      events.some((e) => e.name === 'w.txt' && e.type === 'write'), 15_000)
    assert.ok(ok, `events: ${JSON.stringify(events)}`)
    await handle.stop()
    const count = events.length
    await sbx.files.write(`${dir}/after-stop.txt`, 'x')
    await new Promise((resolve) => setTimeout(resolve, 1500))
    assert.ok(!events.slice(count).some((e) => e.name === 'after-stop.txt'), 'event delivered after stop')
  })

  it('watchDir recursive sees nested changes', { timeout: TEST_TIMEOUT }, async () => {
    const dir = `/home/user/rwatch-${uniq()}`
    await sbx.files.makeDir(`${dir}/nested`)
    const events = []
    const handle = await sbx.files.watchDir(dir, (e) => { events.push(e) }, { recursive: true, timeoutMs: 60_000 })
    await sbx.files.write(`${dir}/nested/n.txt`, 'n')
    const ok = await waitUntil(() => events.some((e) => e.name === 'nested/n.txt'), 15_000)
    await handle.stop()
    assert.ok(ok, `events: ${JSON.stringify(events)}`)
  })

  it('uploadUrl and downloadUrl work without headers', { timeout: TEST_TIMEOUT }, async () => {
    const path = `/home/user/signed-${uniq()}.txt`
    const body = `signed upload ${uniq()}`
    const up = await sbx.uploadUrl(path)
    assert.match(up, /signature=v1_/)
    const form = new FormData()
    form.append('file', new Blob([body]), 'ignored-name.txt')
    const res = await fetch(up, { method: 'POST', body: form })
    assert.equal(res.status, 200, await res.clone().text())
    assert.equal(await sbx.files.read(path), body)

    const down = await sbx.downloadUrl(path)
    const got = await fetch(down)
    assert.equal(got.status, 200)
    assert.equal(await got.text(), body)

    // A tampered signature is refused.
    const bad = new URL(down)
    bad.searchParams.set('signature', 'v1_' + 'A'.repeat(43))
    const refused = await fetch(bad)
    assert.ok([401, 403].includes(refused.status), `tampered signature: ${refused.status}`)

    // An expired signature is refused.
    const expiring = await sbx.downloadUrl(path, { useSignatureExpiration: 1 })
    await new Promise((resolve) => setTimeout(resolve, 2500))
    const expired = await fetch(expiring)
    assert.equal(expired.status, 401)
  })

  it('50 MB write + read round trip (sha256)', { timeout: TEST_TIMEOUT * 2 }, async () => {
    const data = new Uint8Array(randomBytes(50 * 1024 * 1024))
    const want = sha256(data)
    await sbx.files.write('big-50m.bin', data)
    const r = await sbx.commands.run('sha256sum ~/big-50m.bin; stat -c %s ~/big-50m.bin')
    assert.equal(r.stdout, `${want}  /home/user/big-50m.bin\n${data.length}\n`)
    const got = await sbx.files.read('big-50m.bin', { format: 'bytes' })
    assert.equal(got.length, data.length)
    assert.equal(sha256(got), want)
    await sbx.files.remove('big-50m.bin')
  })
})
