// A template built through api1 with the official SDK's Template builder
// (E2B's v3 build API, run by one node) creates sandboxes through api2: they
// are placed on a node holding the template, the one that built it.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Sandbox, Template } from 'e2b'
import { API1, API2, NODE_IDS, api, nodes, tracker, uniq, via, waitUntil, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('templates')
const ARTIFACTS = process.env.AIRLOCK_CLUSTER_ARTIFACTS || ''
const name = `cluster-tpl-${uniq()}`
const token = uniq()
const ctxDir = mkdtempSync(join(tmpdir(), 'airlock-cluster-tpl-'))
writeFileSync(join(ctxDir, 'hello.txt'), `hello ${token}\n`)

after(async () => {
  await t.killAll()
  await api(API1, 'DELETE', `/templates/${name}`).catch(() => {})
  rmSync(ctxDir, { recursive: true, force: true })
})

const holds = (n) => (n.templates ?? []).some((x) => x === name || x.startsWith(`${name}:`))

describe('templates across the cluster', { timeout: 900_000 }, () => {
  let built = false
  let first

  it('builds through api1 with Template.build', { timeout: 600_000 }, async () => {
    const logs = []
    const template = Template({ fileContextPath: ctxDir })
      .fromTemplate('base')
      .copy('hello.txt', '/opt/hello.txt')
      .runCmd(`echo built-${token} > /opt/marker`, { user: 'root' })
    const info = await Template.build(template, name, { ...via(API1), cpuCount: 1, memoryMB: 512, onBuildLogs: (e) => logs.push(e.message) })
    assert.equal(info.templateId ?? info.name, name, `${JSON.stringify(info)}\nbuild log:\n${logs.join('\n')}`)
    built = true
  })

  it('a create right after the build (as SDK users do), through api2, runs the built image', { timeout: TEST_TIMEOUT }, async () => {
    assert.ok(built, 'the build test did not pass')
    first = await t.createRaw(API2, name)
    const sbx = await Sandbox.connect(first.id, via(API2))
    const r = await sbx.commands.run('cat /opt/marker /opt/hello.txt')
    assert.equal(r.stdout, `built-${token}\nhello ${token}\n`)
  })

  if (!ARTIFACTS) {
    it('one node holds it (the node list), and every create of it through api2 lands there', { timeout: TEST_TIMEOUT }, async () => {
      assert.ok(built, 'the build test did not pass')
      let list
      const held = await waitUntil(async () => {
        list = await nodes(API2)
        return list.some(holds)
      }, 15_000, 500)
      assert.ok(held, `no node lists ${name}: ${JSON.stringify(list.map((n) => [n.id, n.templates]))}`)
      const holders = list.filter(holds).map((n) => n.id)
      assert.equal(holders.length, 1, `nodes holding ${name}: ${holders}`)
      const builder = holders[0]
      assert.ok(NODE_IDS.includes(builder))
      if (first) assert.equal(first.node, builder, `the first create landed on ${first.node}, the template is on ${builder}`)
      // (Whether a create works at once after the build is the test above;
      // here, where creates go once the api tier knows the template.)
      let err
      const placed = await waitUntil(async () => {
        try {
          return await t.createRaw(API2, name)
        } catch (e) {
          err = e
          return undefined
        }
      }, 10_000, 500)
      assert.ok(placed, `no create of ${name} through api2 within 10 s: ${err?.message}`)
      assert.equal(placed.node, builder, `a create of ${name} landed on ${placed.node}, the template is on ${builder}`)
      for (let i = 0; i < 3; i++) {
        const s = await t.createRaw(API2, name)
        assert.equal(s.node, builder, `create ${i + 1} of ${name} landed on ${s.node}, the template is on ${builder}`)
      }
      await t.killAll()
    })
  } else {
    // With an artifact store (run-cluster.sh --artifacts) every node pulls
    // the template on first use: creates spread over the nodes.
    it('with an artifact store, creates of it run on the other nodes too (pulled on first use)', { timeout: TEST_TIMEOUT }, async () => {
      assert.ok(built, 'the build test did not pass')
      await t.killAll()
      const on = {}
      for (let i = 0; i < 6; i++) {
        const s = await t.createRaw(API2, name)
        const sbx = await Sandbox.connect(s.id, via(API2))
        assert.equal((await sbx.commands.run('cat /opt/marker')).stdout, `built-${token}\n`, `on ${s.node}`)
        on[s.node] = (on[s.node] ?? 0) + 1
        if (i % 2 === 1) await t.killAll() // room on the nodes
      }
      assert.ok(Object.keys(on).length >= 2, `6 creates of ${name} all ran on one node: ${JSON.stringify(on)}`)
      await t.killAll()
    })
  }

  it('the template is listed through either api instance', { timeout: TEST_TIMEOUT }, async () => {
    for (const base of [API1, API2]) {
      const r = await api(base, 'GET', '/templates')
      assert.equal(r.status, 200, r.text)
      const mine = r.body.filter((x) => x.templateID === name || (x.aliases ?? []).includes(name) || x.names?.includes(name))
      assert.equal(mine.length, 1, `templates through ${base}: ${JSON.stringify(r.body.map((x) => [x.templateID, x.aliases]))}`)
    }
    assert.equal(await Template.exists(name, via(API2)), true)
  })
})

// A template nobody holds: a create is refused, not placed blindly.
describe('placement by template', () => {
  it('a create of an unknown template fails clearly through the balancer', { timeout: TEST_TIMEOUT }, async () => {
    const r = await api(API2, 'POST', '/v2/sandboxes', { templateID: `no-such-${uniq()}`, timeout: 60 })
    assert.ok(r.status === 404 || r.status === 400, `create of an unknown template: ${r.status} ${r.text}`)
    assert.equal(await Sandbox.list({ ...via(API2), query: { metadata: t.metadata } }).nextItems().then((x) => x.length), 0)
  })
})
