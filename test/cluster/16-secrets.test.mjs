// Egress secrets in a cluster (issue 29): /secrets through the api tier
// (forwarded to any live node: the nodes share the store, and every daemon
// of the cluster gets the same --secrets-key-file, so each can open what
// another sealed), network.rules on a create the api tier places and on
// GET /sandboxes/{id} and PUT …/network it routes to the sandbox's node,
// and every node's egress proxy putting the secret into the request while
// no API answer holds it.
//
// Needs root on the host: a network namespace we own stands in for the
// internet (<ext>.16/29: an HTTPS server for secrets-a.test at <ext>.18 with
// the leaf of AIRLOCK_E2E_UPSTREAM_CA_DIR, and a DNS server at <ext>.20).
// scripts/test.sh's cluster stage starts the nodes with --dns-upstream
// <ext>.20, --deny-out-except <ext>.0/27 and --egress-proxy-upstream-ca.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { Sandbox } from 'e2b'
import { LB, API1, API2, NODE_IDS, api, tracker, via, sh, waitUntil, nodeURL, nodeFetch, asAPITier, TEST_TIMEOUT } from './helpers.mjs'
import { dnsServer, resolveA } from '../e2e/standin.mjs'

const t = tracker('secrets')
const caDir = process.env.AIRLOCK_E2E_UPSTREAM_CA_DIR
const ext = process.env.AIRLOCK_E2E_EXT_NET ?? '10.78.255'
const hostIP = `${ext}.17`
const ipA = `${ext}.18`
const ipDNS = `${ext}.20`
const id = t.tag.slice(-6)
const ns = `e2e-csec-${id}`
const hostIf = `e2cs${id}`
const nsIf = `e2ct${id}`
const run = (...args) => execFileSync('ip', args, { stdio: 'pipe' })
let server
const secretName = `cluster-${id}`
const value = `cluster-secret-${t.tag}-VALUE`

const rules = (header, name = secretName) => ({ 'secrets-a.test': [{ transform: { headers: { [header]: `Bearer \${e2b.secrets.${name}}` } } }] })

after(async () => {
  await t.killAll()
  await api(LB, 'DELETE', `/secrets/${secretName}`).catch(() => {})
  server?.kill()
  try { run('link', 'del', hostIf) } catch {}
  try { run('netns', 'del', ns) } catch {}
})

/** curl https://secrets-a.test/headers in sbx: what the server saw. */
async function seen (sbx) {
  const r = await sh(sbx, 'curl -sS -m 20 https://secrets-a.test/headers', { timeoutMs: 60_000 })
  assert.equal(r.exitCode, 0, `curl: ${r.stderr}`)
  return JSON.parse(r.stdout)
}

describe('egress secrets in a cluster', { timeout: TEST_TIMEOUT * 4 }, () => {
  before(async () => {
    assert.ok(caDir, 'AIRLOCK_E2E_UPSTREAM_CA_DIR is not set (scripts/test.sh makes the upstream CA)')
    run('netns', 'add', ns)
    run('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf)
    run('link', 'set', nsIf, 'netns', ns)
    run('addr', 'add', `${hostIP}/29`, 'dev', hostIf)
    run('link', 'set', hostIf, 'up')
    run('-n', ns, 'addr', 'add', `${ipA}/29`, 'dev', nsIf)
    run('-n', ns, 'addr', 'add', `${ipDNS}/29`, 'dev', nsIf)
    run('-n', ns, 'link', 'set', nsIf, 'up')
    run('-n', ns, 'link', 'set', 'lo', 'up')
    run('-n', ns, 'route', 'add', 'default', 'via', hostIP)
    server = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', `
      const fs = require('fs')
      require('https').createServer({ cert: fs.readFileSync('${caDir}/leaf.pem'), key: fs.readFileSync('${caDir}/leaf.key') },
        (q, s) => s.end(JSON.stringify({ host: q.headers.host, authorization: q.headers.authorization ?? null, apiKey: q.headers['x-api-key'] ?? null }))).listen(443, '${ipA}')
      ${dnsServer.toString()}
      dnsServer('${ipDNS}', { 'secrets-a.test': '${ipA}' })`], { stdio: 'ignore' })
    const up = await waitUntil(async () => {
      try { return (await resolveA(ipDNS, 'secrets-a.test')) === ipA } catch { return false }
    }, 10_000)
    assert.ok(up, 'the stand-in DNS server did not start')
  }, { timeout: 30_000 })

  it('/secrets through both api instances: created, listed, read, never returned', { timeout: TEST_TIMEOUT }, async () => {
    const made = await api(LB, 'POST', '/secrets', { name: secretName, value })
    assert.equal(made.status, 201, made.text)
    assert.ok(!made.text.includes(value), 'the create answer holds the value')
    for (const base of [API1, API2]) {
      const one = await api(base, 'GET', `/secrets/${secretName}`)
      assert.equal(one.status, 200, one.text)
      assert.equal(one.body.name, secretName)
      assert.match(one.headers.get('cache-control') ?? '', /no-store/)
      assert.ok(!one.text.includes(value), `GET /secrets/{name} through ${base} holds the value`)
      const list = await api(base, 'GET', '/secrets?limit=100')
      assert.equal(list.status, 200, list.text)
      assert.ok(!list.text.includes(value), 'the list holds the value')
    }
  })

  it('a create with rules placed by the api tier: rules echoed, the header injected, updated live', { timeout: TEST_TIMEOUT }, async () => {
    // An unknown secret name is refused at create, as E2B does.
    const bad = await api(LB, 'POST', '/v2/sandboxes', { templateID: 'base', timeout: 300, metadata: t.metadata, network: { rules: rules('Authorization', `nope-${id}`) } }, 120_000)
    assert.equal(bad.status, 400, bad.text)

    const r = await api(LB, 'POST', '/v2/sandboxes', { templateID: 'base', timeout: 300, metadata: t.metadata, network: { rules: rules('Authorization') } }, 120_000)
    assert.equal(r.status, 201, r.text)
    t.add(r.body.sandboxID)
    assert.ok(r.node, 'no X-Airlock-Node on the create answer')
    assert.ok(!r.text.includes(value), 'the create answer holds the value')
    const sandboxId = r.body.sandboxID

    for (const base of [API1, API2]) {
      const info = await api(base, 'GET', `/sandboxes/${sandboxId}`)
      assert.equal(info.status, 200, info.text)
      assert.deepEqual(info.body.network?.rules, rules('Authorization'), `GET /sandboxes/{id} through ${base}: ${info.text}`)
      assert.ok(!info.text.includes(value), 'the sandbox info holds the value')
    }

    const sbx = await Sandbox.connect(sandboxId, via(LB))
    assert.deepEqual(await seen(sbx), { host: 'secrets-a.test', authorization: `Bearer ${value}`, apiKey: null })
    const env = await sh(sbx, "env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'", { user: 'root', timeoutMs: 60_000 })
    assert.ok(env.stdout.includes('PATH=') && !env.stdout.includes(value), 'the sandbox environment holds the secret')

    // PUT …/network with other rules, through the other api instance.
    const put = await api(API2, 'PUT', `/sandboxes/${sandboxId}/network`, { rules: rules('X-Api-Key') })
    assert.equal(put.status, 204, put.text)
    assert.deepEqual(await seen(sbx), { host: 'secrets-a.test', authorization: null, apiKey: `Bearer ${value}` })
    const info = await api(API1, 'GET', `/sandboxes/${sandboxId}`)
    assert.deepEqual(info.body.network?.rules, rules('X-Api-Key'), info.text)
  })

  it('every node opens the secret the api tier stored: a sandbox with rules on each', { timeout: TEST_TIMEOUT * 2 }, async () => {
    for (const node of NODE_IDS) {
      const res = await nodeFetch(`${nodeURL(node)}/v2/sandboxes`, {
        method: 'POST',
        headers: { ...asAPITier(), 'Content-Type': 'application/json' },
        body: JSON.stringify({ templateID: 'base', timeout: 300, metadata: t.metadata, network: { rules: rules('Authorization') } }),
        timeoutMs: 120_000
      })
      const text = await res.text()
      assert.equal(res.status, 201, `create with rules on ${node}: ${text}`)
      const sandboxId = t.add(JSON.parse(text).sandboxID)
      const sbx = await Sandbox.connect(sandboxId, via(LB))
      assert.deepEqual(await seen(sbx), { host: 'secrets-a.test', authorization: `Bearer ${value}`, apiKey: null }, `on ${node}`)
      await Sandbox.kill(sandboxId, via(LB))
      t.forget(sandboxId)
    }
  })
})
