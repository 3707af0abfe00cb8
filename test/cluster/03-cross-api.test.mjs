// The api tier is stateless: a sandbox created through one instance is used,
// listed and killed through the other, and the v2 list's pages (whose
// nextToken one instance issues and the other may redeem, behind the
// balancer) return every sandbox exactly once.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { LB, API1, API2, api, tracker, via, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('cross-api')
after(() => t.killAll())

/** Every sandbox with our tag listed through base (all pages). */
async function listed (base, extra = {}) {
  const pager = Sandbox.list({ ...via(base), query: { metadata: t.metadata }, ...extra })
  const ids = []
  while (pager.hasNext) {
    for (const s of await pager.nextItems()) ids.push(s.sandboxId)
  }
  return ids
}

describe('across the api instances', { timeout: TEST_TIMEOUT * 4 }, () => {
  it('created through api1, used and killed through api2, listed through both until killed', { timeout: TEST_TIMEOUT }, async () => {
    const a = await t.create({ ...via(API1) })
    await a.commands.run('echo from-api1 > /home/user/origin.txt')
    await a.files.write('/home/user/note.txt', 'written through api1\n')

    const b = await Sandbox.connect(a.sandboxId, via(API2))
    assert.equal(b.sandboxId, a.sandboxId)
    const r = await b.commands.run('cat /home/user/origin.txt /home/user/note.txt')
    assert.equal(r.stdout, 'from-api1\nwritten through api1\n')
    await b.files.write('/home/user/note.txt', 'rewritten through api2\n')
    assert.equal(await a.files.read('/home/user/note.txt'), 'rewritten through api2\n', 'api1 does not see the write made through api2')

    for (const base of [API1, API2]) {
      assert.deepEqual(await listed(base), [a.sandboxId], `list through ${base}`)
      const info = await api(base, 'GET', `/sandboxes/${a.sandboxId}`)
      assert.equal(info.status, 200, `GET through ${base}: ${info.text}`)
    }

    assert.equal(await Sandbox.kill(a.sandboxId, via(API2)), true)
    t.forget(a.sandboxId)
    for (const base of [API1, API2]) {
      assert.deepEqual(await listed(base), [], `list through ${base} after the kill`)
      const info = await api(base, 'GET', `/sandboxes/${a.sandboxId}`)
      assert.equal(info.status, 404, `GET through ${base} after the kill: ${info.status} ${info.text}`)
    }
    await assert.rejects(a.commands.run('true', { requestTimeoutMs: 15_000 }), 'api1 still runs commands in the killed sandbox')
  })

  it('v2 list pagination through the balancer returns every sandbox exactly once', { timeout: TEST_TIMEOUT }, async () => {
    const want = []
    for (let i = 0; i < 5; i++) want.push((await t.createRaw(LB)).id)
    // Pages of 2: 3 pages, the requests alternating between the instances.
    const pager = Sandbox.list({ ...via(LB), query: { metadata: t.metadata }, limit: 2 })
    const got = []
    let pages = 0
    while (pager.hasNext) {
      const items = await pager.nextItems()
      assert.ok(items.length <= 2, `page of ${items.length}`)
      got.push(...items.map((s) => s.sandboxId))
      pages++
      assert.ok(pages <= 10, 'pagination does not end')
    }
    assert.equal(pages, 3, `pages: ${pages}`)
    assert.equal(new Set(got).size, got.length, `a sandbox listed twice: ${JSON.stringify(got)}`)
    assert.deepEqual([...got].sort(), [...want].sort())

    // The same through the raw API, one page from each instance in turn.
    const raw = []
    let token
    for (let i = 0; i < 10; i++) {
      const base = i % 2 === 0 ? API1 : API2
      const q = new URLSearchParams({ limit: '2', metadata: `cluster-suite=${t.tag}` })
      if (token) q.set('nextToken', token)
      const r = await api(base, 'GET', `/v2/sandboxes?${q}`)
      assert.equal(r.status, 200, r.text)
      raw.push(...r.body.map((s) => s.sandboxID))
      token = r.headers.get('x-next-token')
      if (!token) break
    }
    assert.deepEqual([...raw].sort(), [...want].sort(), 'raw pages alternating api1/api2')
    await t.killAll()
  })
})
