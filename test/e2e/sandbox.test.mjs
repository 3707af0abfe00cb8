// Sandbox lifecycle through the official E2B SDK: create, info, list,
// connect, timeouts, kill, errors.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import {
  Sandbox, AuthenticationError, NotFoundError, SandboxNotFoundError
} from 'e2b'
import { tracker, uniq, sleep, waitUntil, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('sandbox')
after(() => t.killAll())

describe('sandbox lifecycle', { timeout: TEST_TIMEOUT * 3 }, () => {
  it('create with metadata and envs; envs reach commands; getInfo', { timeout: TEST_TIMEOUT }, async () => {
    const value = `v-${uniq()}`
    const sbx = await t.create({ metadata: { role: 'info' }, envs: { AIRLOCK_E2E_X: value } })
    assert.match(sbx.sandboxId, /^[a-z0-9]+$/)

    const r = await sbx.commands.run('echo $AIRLOCK_E2E_X')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, `${value}\n`)

    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.equal(info.templateId !== undefined && info.templateId !== '', true)
    assert.equal(info.state, 'running')
    assert.equal(info.metadata.role, 'info')
    assert.equal(info.metadata['e2e-suite'], t.tag)
    assert.ok(info.startedAt instanceof Date && !isNaN(info.startedAt))
    assert.ok(info.endAt > info.startedAt, 'endAt after startedAt')
    const left = info.endAt.getTime() - Date.now()
    assert.ok(left > 200_000 && left <= 310_000, `endAt ~300 s away, got ${left} ms`)
    assert.ok(info.cpuCount >= 1)
    assert.ok(info.memoryMB >= 1)

    const static_ = await Sandbox.getInfo(sbx.sandboxId)
    assert.equal(static_.sandboxId, sbx.sandboxId)
  })

  it('list filters by metadata and paginates with limit 1', { timeout: TEST_TIMEOUT }, async () => {
    const group = `list-${uniq()}`
    const a = await t.create({ metadata: { group } })
    const b = await t.create({ metadata: { group } })
    await t.create({ metadata: { group: `${group}-other` } })

    const pager = Sandbox.list({ query: { metadata: { group } }, limit: 1 })
    const seen = []
    let pages = 0
    while (pager.hasNext) {
      const items = await pager.nextItems()
      pages++
      assert.ok(items.length <= 1, `page of ${items.length} items with limit 1`)
      seen.push(...items.map((i) => i.sandboxId))
      assert.ok(pages < 10, 'paginator does not terminate')
    }
    assert.deepEqual(seen.sort(), [a.sandboxId, b.sandboxId].sort())
    assert.ok(pages >= 2, `expected >= 2 pages, got ${pages}`)

    // Special characters in metadata survive the double encoding.
    const odd = `a b&c=d/é ${uniq()}`
    const c = await t.create({ metadata: { odd } })
    const items = await Sandbox.list({ query: { metadata: { odd } } }).nextItems()
    assert.deepEqual(items.map((i) => i.sandboxId), [c.sandboxId])
    assert.equal(items[0].metadata.odd, odd)
    assert.equal(items[0].state, 'running')

    const running = await Sandbox.list({ query: { metadata: { odd }, state: ['running'] } }).nextItems()
    assert.equal(running.length, 1)
  })

  it('connect from a second Sandbox object', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create()
    await sbx.files.write('/home/user/hello.txt', 'from-first')
    const again = await Sandbox.connect(sbx.sandboxId)
    assert.equal(again.sandboxId, sbx.sandboxId)
    const r = await again.commands.run('cat /home/user/hello.txt')
    assert.equal(r.stdout, 'from-first')
    assert.equal(await again.isRunning(), true)
  })

  it('timeout expiry is accurate to ~1 s and setTimeout extends it', { timeout: TEST_TIMEOUT }, async () => {
    const short = await t.create({ timeoutMs: 5_000 })
    const shortCreated = Date.now()
    const extended = await t.create({ timeoutMs: 5_000 })
    const extendAsked = Date.now()
    await extended.setTimeout(10_000)
    const extendDone = Date.now()

    assert.equal(await short.isRunning(), true)
    // Gone by 7 s after creation returned (5 s timeout + ~1 s accuracy + slack).
    await sleep(Math.max(0, shortCreated + 7_000 - Date.now()))
    assert.equal(await short.isRunning(), false, 'sandbox with a 5 s timeout still running 7 s after create')
    await assert.rejects(Sandbox.getInfo(short.sandboxId), NotFoundError)

    // Extended to 10 s: alive 7 s after the extension, gone by ~12 s.
    await sleep(Math.max(0, extendDone + 7_000 - Date.now()))
    assert.equal(await extended.isRunning(), true, 'sandbox extended to 10 s is not running 7 s later')
    const gone = await waitUntil(async () => !(await extended.isRunning()), extendDone + 12_500 - Date.now(), 250)
    const goneAt = Date.now()
    assert.equal(gone, true, 'extended sandbox still running 12.5 s after setTimeout(10 s)')
    assert.ok(goneAt - extendAsked >= 9_000, `extended sandbox expired after ${goneAt - extendAsked} ms, before its 10 s timeout`)
  })

  it('kill; kill of an unknown id returns false', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create()
    assert.equal(await sbx.isRunning(), true)
    assert.equal(await sbx.kill(), true)
    assert.equal(await sbx.isRunning(), false)
    assert.equal(await Sandbox.kill(sbx.sandboxId), false)
    assert.equal(await Sandbox.kill('nosuchsandbox0000000'), false)
    const items = await Sandbox.list({ query: { metadata: t.metadata } }).nextItems()
    assert.ok(!items.some((i) => i.sandboxId === sbx.sandboxId), 'killed sandbox still listed')
  })

  it('unknown id: getInfo and connect throw SandboxNotFoundError', { timeout: TEST_TIMEOUT }, async () => {
    await assert.rejects(Sandbox.getInfo('nosuchsandbox0000000'), (err) => {
      assert.ok(err instanceof SandboxNotFoundError || err instanceof NotFoundError, `got ${err?.name}: ${err?.message}`)
      return true
    })
    await assert.rejects(Sandbox.connect('nosuchsandbox0000000'), (err) => {
      assert.ok(err instanceof NotFoundError, `got ${err?.name}: ${err?.message}`)
      return true
    })
  })

  it('wrong API key: AuthenticationError', { timeout: TEST_TIMEOUT }, async () => {
    const apiKey = 'e2b_' + '0'.repeat(40)
    await assert.rejects(Sandbox.create({ apiKey, timeoutMs: 10_000 }), AuthenticationError)
    await assert.rejects(Sandbox.list({ apiKey }).nextItems(), AuthenticationError)
    await assert.rejects(Sandbox.kill('nosuchsandbox0000000', { apiKey }), AuthenticationError)
  })

  it('unknown template fails cleanly', { timeout: TEST_TIMEOUT }, async () => {
    await assert.rejects(Sandbox.create('no-such-template-e2e', { timeoutMs: 10_000 }), (err) => {
      assert.ok(err instanceof Error && !(err instanceof AuthenticationError), `got ${err?.name}`)
      return true
    })
  })
})
