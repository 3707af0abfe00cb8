// network.egressProxy in a cluster (issue 29): a create through the api
// tier with E2B's SOCKS5 upstream (RFC 1929 auth), placed on some node,
// whose TCP then leaves through the proxy; GET /sandboxes/{id} through
// both api instances shows it without the password; PUT …/network through
// the api tier (routed to the sandbox's node) switches it off.
//
// Needs root on the host: a network namespace we own stands in for the
// internet (<ext>.24/29: an HTTP server at <ext>.26 that answers with its
// peer's address, and a SOCKS5 server with auth at <ext>.27, which dials
// from .27, so a proxied request's peer is .27 and a direct one's is the
// node, <ext>.25). scripts/test.sh's cluster stage starts the nodes with
// --deny-out-except <ext>.0/27 and --egress-proxy-allow-private (the SOCKS
// server is a private address).
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { Sandbox } from 'e2b'
import { LB, API1, API2, NODE_IDS, ARTIFACTS, api, tracker, via, sh, waitUntil, nodeURL, nodeFetch, asAPITier, drainNode, restoreNodes, where, TEST_TIMEOUT } from './helpers.mjs'
import { socksServer } from '../e2e/standin.mjs'

const t = tracker('egressproxy')
const ext = process.env.AIRLOCK_E2E_EXT_NET ?? '10.78.255'
const hostIP = `${ext}.25`
const ipA = `${ext}.26`
const ipB = `${ext}.27`
const id = t.tag.slice(-6)
const ns = `e2e-csok-${id}`
const hostIf = `e2ck${id}`
const nsIf = `e2cl${id}`
const user = 'airlock'
const pass = `socks-${t.tag}`
const proxy = { address: `${ipB}:1080`, username: user, password: pass }
const run = (...args) => execFileSync('ip', args, { stdio: 'pipe' })
const targets = [] // the SOCKS server's CONNECT targets
let server

after(async () => {
  await t.killAll()
  await restoreNodes()
  server?.kill('SIGKILL')
  try { run('link', 'del', hostIf) } catch {}
  try { run('netns', 'del', ns) } catch {}
})

/** curl http://<A>:8081/ in sbx: the body (the server's view of its peer). */
async function peer (sbx) {
  const r = await sh(sbx, `curl -sS -m 20 http://${ipA}:8081/`, { timeoutMs: 60_000 })
  assert.equal(r.exitCode, 0, `curl: ${r.stderr}`)
  return r.stdout
}

describe('egressProxy in a cluster', { timeout: TEST_TIMEOUT * 4 }, () => {
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
    server = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', `
      require('http').createServer((q, s) => s.end('peer ' + q.socket.remoteAddress)).listen(8081, '${ipA}')
      ${socksServer.toString()}
      socksServer('${ipB}', '${user}', '${pass}')
      console.log(JSON.stringify({ up: true }))`], { stdio: ['ignore', 'pipe', 'inherit'] })
    let up = false
    createInterface({ input: server.stdout }).on('line', (l) => {
      try {
        const m = JSON.parse(l)
        if (m.up) up = true
        if (m.target) targets.push(m.target)
      } catch {}
    })
    assert.ok(await waitUntil(() => up, 10_000), 'the stand-in servers did not start')
  }, { timeout: 30_000 })

  it('created through the api tier: TCP leaves through the SOCKS server, GET shows it without the password, PUT network switches it off', { timeout: TEST_TIMEOUT * 2 }, async () => {
    const r = await api(LB, 'POST', '/v2/sandboxes', { templateID: 'base', timeout: 300, metadata: t.metadata, network: { egressProxy: proxy } }, 120_000)
    assert.equal(r.status, 201, r.text)
    assert.ok(r.node, 'no X-Airlock-Node on the create answer')
    assert.ok(!r.text.includes(pass), 'the create answer holds the proxy password')
    const sandboxId = t.add(r.body.sandboxID)

    for (const base of [API1, API2]) {
      const info = await api(base, 'GET', `/sandboxes/${sandboxId}`)
      assert.equal(info.status, 200, info.text)
      assert.deepEqual(info.body.network?.egressProxy, { address: proxy.address, username: user }, `GET /sandboxes/{id} through ${base}: ${info.text}`)
      assert.ok(!info.text.includes(pass), `GET /sandboxes/{id} through ${base} holds the proxy password`)
    }
    const list = await api(LB, 'GET', '/v2/sandboxes?limit=100')
    assert.ok(!list.text.includes(pass), 'the sandbox list holds the proxy password')

    const sbx = await Sandbox.connect(sandboxId, via(LB))
    const n = targets.length
    assert.equal(await peer(sbx), `peer ${ipB}`, 'the server did not see the proxy as its peer')
    assert.deepEqual(targets.slice(n), [`${ipA}:8081`], 'the SOCKS server was not asked for the destination')

    // PUT …/network without egressProxy, through the other api instance: direct.
    const put = await api(API2, 'PUT', `/sandboxes/${sandboxId}/network`, {})
    assert.equal(put.status, 204, put.text)
    const m = targets.length
    assert.equal(await peer(sbx), `peer ${hostIP}`, 'after PUT network {} the request still went through the proxy')
    assert.equal(targets.length, m, 'the SOCKS server was asked after the proxy was switched off')
    const info = await api(API1, 'GET', `/sandboxes/${sandboxId}`)
    assert.equal(info.status, 200, info.text)
    assert.equal(info.body.network?.egressProxy, undefined, `egressProxy still shown after PUT network {}: ${info.text}`)

    // And on again through the api tier, with a wrong password: nothing leaves.
    const bad = await api(API1, 'PUT', `/sandboxes/${sandboxId}/network`, { egressProxy: { ...proxy, password: 'wrong' } })
    assert.equal(bad.status, 204, bad.text)
    const w = await sh(sbx, `curl -sS -m 10 http://${ipA}:8081/`, { timeoutMs: 60_000 })
    assert.notEqual(w.exitCode, 0, `a wrong proxy password still connected: ${w.stdout}`)
  })

  it('moved by a drain to another node, the sandbox still tunnels through the SOCKS server', { timeout: TEST_TIMEOUT * 2, skip: !ARTIFACTS && 'moves need an artifact store (run-cluster.sh --artifacts)' }, async () => {
    const A = NODE_IDS[0]
    const res = await nodeFetch(`${nodeURL(A)}/v2/sandboxes`, {
      method: 'POST',
      headers: { ...asAPITier(), 'Content-Type': 'application/json' },
      body: JSON.stringify({ templateID: 'base', timeout: 300, metadata: t.metadata, network: { egressProxy: proxy } }),
      timeoutMs: 120_000
    })
    const text = await res.text()
    assert.equal(res.status, 201, `create with an egressProxy on ${A}: ${text}`)
    const sandboxId = t.add(JSON.parse(text).sandboxID)
    const sbx = await Sandbox.connect(sandboxId, via(LB))
    assert.equal(await peer(sbx), `peer ${ipB}`, `on ${A}: not through the proxy`)
    try {
      const d = await drainNode(A)
      assert.equal(d.status, 200, d.text)
      const w = await where(sandboxId)
      assert.equal(w.status, 200, JSON.stringify(w))
      assert.notEqual(w.node, A, `${sandboxId} still on the drained ${A}`)
      const moved = await Sandbox.connect(sandboxId, via(LB))
      const n = targets.length
      assert.equal(await peer(moved), `peer ${ipB}`, `moved to ${w.node}: not through the proxy`)
      assert.deepEqual(targets.slice(n), [`${ipA}:8081`], `moved to ${w.node}: the SOCKS server was not asked`)
      const info = await api(LB, 'GET', `/sandboxes/${sandboxId}`)
      assert.deepEqual(info.body.network?.egressProxy, { address: proxy.address, username: user }, info.text)
    } finally {
      await restoreNodes()
    }
  })
})
