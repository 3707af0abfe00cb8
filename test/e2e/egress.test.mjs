// Egress policy: network.allowOut / network.denyOut (IPs and CIDRs) at create
// and live through PUT /sandboxes/{id}/network (sbx.updateNetwork). Needs root
// on the host: a network namespace we own stands in for "the internet" with
// two servers on two addresses.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { Sandbox } from 'e2b'
import { tracker, uniq, sh, sleep, waitUntil, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('egress')
after(() => t.killAll())

/** curl from inside; returns {ok, body}. */
async function curl (sbx, url, seconds = 3) {
  const r = await sh(sbx, `curl -sS -m ${seconds} ${url}`, { timeoutMs: (seconds + 20) * 1000 })
  return { ok: r.exitCode === 0, body: r.stdout, stderr: r.stderr }
}

describe('egress policy', { timeout: TEST_TIMEOUT * 6 }, () => {
  const id = uniq().slice(0, 6)
  const ns = `e2e-eg-${id}`
  const hostIf = `e2eg${id}`
  const nsIf = `e2eh${id}`
  // A /29 of the stand-in network that isolation.test.mjs's /30 (.0-.3)
  // does not use, so both files can run at once.
  const extBase = process.env.AIRLOCK_E2E_EXT_NET ?? '10.78.255'
  const hostIP = `${extBase}.9`
  const ipA = `${extBase}.10`
  const ipB = `${extBase}.11`
  const urlA = `http://${ipA}:8080/`
  const urlB = `http://${ipB}:8080/`
  let server
  const run = (...args) => execFileSync('ip', args, { stdio: 'pipe' })

  const reaches = async (sbx, url, name) => {
    const r = await curl(sbx, url)
    return r.ok && r.body === name
  }

  before(async () => {
    run('netns', 'add', ns)
    run('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf)
    run('link', 'set', nsIf, 'netns', ns)
    run('addr', 'add', `${hostIP}/29`, 'dev', hostIf)
    run('link', 'set', hostIf, 'up')
    run('-n', ns, 'addr', 'add', `${ipA}/29`, 'dev', nsIf)
    run('-n', ns, 'addr', 'add', `${ipB}/29`, 'dev', nsIf)
    run('-n', ns, 'link', 'set', nsIf, 'up')
    run('-n', ns, 'link', 'set', 'lo', 'up')
    run('-n', ns, 'route', 'add', 'default', 'via', hostIP)
    // One server per address, each answering its own name.
    server = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', `
      const http = require('http')
      http.createServer((q, s) => s.end('A')).listen(8080, '${ipA}')
      http.createServer((q, s) => s.end('B')).listen(8080, '${ipB}')`], { stdio: 'ignore' })
    const up = await waitUntil(async () => {
      try {
        return (await (await fetch(urlA)).text()) === 'A' && (await (await fetch(urlB)).text()) === 'B'
      } catch { return false }
    }, 10_000)
    assert.ok(up, 'test servers in the external namespace did not start')
  }, { timeout: 30_000 })

  after(async () => {
    server?.kill('SIGKILL')
    await sleep(200)
    try { run('link', 'del', hostIf) } catch {}
    try { run('netns', 'del', ns) } catch {}
  })

  it('allowOut one address, deny the rest', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create({ network: { allowOut: [ipA], denyOut: ['0.0.0.0/0'] } })
    assert.ok(await reaches(sbx, urlA, 'A'), 'allowOut address not reachable')
    assert.equal(await reaches(sbx, urlB, 'B'), false, 'address outside allowOut reachable')
    const info = await sbx.getInfo()
    assert.deepEqual(info.network?.allowOut, [ipA])
    assert.deepEqual(info.network?.denyOut, ['0.0.0.0/0'])
  })

  it('denyOut one address, allow the rest', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create({ network: { denyOut: [`${ipB}/32`] } })
    assert.ok(await reaches(sbx, urlA, 'A'), 'address not in denyOut unreachable')
    assert.equal(await reaches(sbx, urlB, 'B'), false, 'denyOut address reachable')
  })

  it('updateNetwork changes the policy live; omitted fields are cleared', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create()
    assert.ok(await reaches(sbx, urlB, 'B'), 'default sandbox cannot reach the outside')
    await sbx.updateNetwork({ denyOut: [ipB] })
    assert.equal(await reaches(sbx, urlB, 'B'), false, 'still reachable after denyOut')
    assert.ok(await reaches(sbx, urlA, 'A'))
    await sbx.updateNetwork({ allowInternetAccess: false, allowOut: [ipB] })
    assert.ok(await reaches(sbx, urlB, 'B'), 'allowOut without internet not reachable')
    assert.equal(await reaches(sbx, urlA, 'A'), false, 'internet off but reachable')
    let info = await sbx.getInfo()
    assert.equal(info.allowInternetAccess, false)
    assert.deepEqual(info.network?.allowOut, [ipB])
    await sbx.updateNetwork({})
    assert.ok(await reaches(sbx, urlA, 'A'), 'not reachable after clearing the policy')
    info = await sbx.getInfo()
    assert.equal(info.allowInternetAccess, true)
    assert.equal(info.network?.denyOut, undefined)
  })

  it('allowInternetAccess:false with allowOut reaches only the listed address', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create({ allowInternetAccess: false, network: { allowOut: [`${ipA}/32`] } })
    assert.ok(await reaches(sbx, urlA, 'A'), 'allowOut address not reachable without internet')
    assert.equal(await reaches(sbx, urlB, 'B'), false, 'reached the outside without internet access')
    // The agent still works.
    const e = await sbx.commands.run('echo fine')
    assert.equal(e.stdout, 'fine\n')
  })

  it('rejects domains and bad CIDRs with 400', { timeout: TEST_TIMEOUT }, async () => {
    await assert.rejects(t.create({ network: { allowOut: ['example.com'] } }), /domain rules are not supported yet/)
    const sbx = await t.create()
    await assert.rejects(sbx.updateNetwork({ denyOut: ['10.0.0.0/40'] }), /denyOut entry/)
    await assert.rejects(Sandbox.updateNetwork('inotthere', { denyOut: ['0.0.0.0/0'] }), /not found/i)
  })
})
