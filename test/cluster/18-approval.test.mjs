// The egress approval hook in a cluster (issue 28 part 3): network.approval
// on a create the api tier places and on PUT …/network it routes to the
// sandbox's node, echoed (never its secret) by GET through either api
// instance; the node holding the connection asks the webhook; the stream
// variant, GET /sandboxes/{id}/network/approvals, is a long-lived
// server-sent-event stream through haproxy and an api instance (no
// buffering: a question arrives while its connection is held; no short
// proxy timeout: it stays open while idle), answered with POST
// …/approvals/{decisionId} through the other api instance.
//
// Needs root on the host: a network namespace we own stands in for the
// internet at <ext>.8/29 (inside the <ext>.0/27 that scripts/test.sh's
// cluster stage opens on the nodes with --deny-out-except). The webhook
// receiver is on this host's loopback (the nodes run with
// --webhook-allow-private). Each node binds its own NFQUEUE (derived from
// its net prefix). With an artifact store, a drain moves a sandbox with a
// hook: the node it lands on holds and asks the same webhook.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { createServer } from 'node:http'
import { createHash } from 'node:crypto'
import { Sandbox } from 'e2b'
import { LB, API1, API2, ARTIFACTS, api, tracker, via, sh, sleep, waitUntil, where, drainNode, restoreNodes, API_KEY, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('approval')
const ext = process.env.AIRLOCK_E2E_EXT_NET ?? '10.78.255'
const hostIP = `${ext}.9`
const onceIP = `${ext}.10`
const denyIP = `${ext}.11`
const streamIP = `${ext}.12`
const id = t.tag.slice(-6)
const ns = `e2e-cap-${id}`
const hostIf = `e2ca${id}`
const nsIf = `e2cb${id}`
const port = 8089
const secret = `hook-${t.tag}`
const run = (...args) => execFileSync('ip', args, { stdio: 'pipe' })
let server

// The webhook: allow onceIP after 300 ms, deny the rest; every question
// (with whether its signature checks out) is kept.
const asked = []
const hook = createServer((req, res) => {
  const chunks = []
  req.on('data', (c) => chunks.push(c))
  req.on('end', () => {
    const body = Buffer.concat(chunks)
    const want = createHash('sha256').update(secret).update(body).digest('base64url')
    const q = JSON.parse(body)
    asked.push({ address: q.address, port: q.port, sandboxId: q.sandboxId, signed: req.headers['e2b-signature'] === want })
    if (q.address === onceIP) setTimeout(() => res.end('{"decision":"allow"}'), 300)
    else res.end('{"decision":"deny"}')
  })
})
await new Promise((resolve) => hook.listen(0, '127.0.0.1', resolve))
const hookURL = `http://127.0.0.1:${hook.address().port}/approve`

after(async () => {
  await restoreNodes().catch((err) => console.log(`# ${err.message}`))
  await t.killAll()
  server?.kill()
  hook.closeAllConnections()
  hook.close()
  try { run('link', 'del', hostIf) } catch {}
  try { run('netns', 'del', ns) } catch {}
})

/** curl ip:port in sbx: {rc, secs, out} (curl's own time). */
async function curl (sbx, ip) {
  const r = await sh(sbx, `curl -sS -m 20 -o /tmp/out -w '%{time_total}' http://${ip}:${port}/ 2>/tmp/err; rc=$?; echo " $rc"; cat /tmp/out /tmp/err 2>/dev/null; true`, { timeoutMs: 60_000 })
  const [secs, rc] = r.stdout.trim().split('\n')[0].trim().split(/\s+/)
  return { rc: Number(rc), secs: Number(secs), out: r.stdout }
}

/** GET …/network/approvals through base: an async iterator of questions, and a stop(). */
function approvals (base, sandboxId) {
  const ctl = new AbortController()
  const got = []
  let status = 0
  const done = (async () => {
    const res = await fetch(`${base}/sandboxes/${sandboxId}/network/approvals`, { headers: { 'X-API-Key': API_KEY }, signal: ctl.signal })
    status = res.status
    const dec = new TextDecoder()
    let buf = ''
    for await (const chunk of res.body) {
      buf += dec.decode(chunk, { stream: true })
      let i
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, i)
        buf = buf.slice(i + 2)
        const data = ev.split('\n').find((l) => l.startsWith('data: '))
        if (data) got.push(JSON.parse(data.slice(6)))
      }
    }
  })().catch(() => {})
  return { got, status: () => status, stop: () => { ctl.abort(); return done } }
}

describe('the egress approval hook in a cluster', { timeout: TEST_TIMEOUT * 4 }, () => {
  before(() => {
    run('netns', 'add', ns)
    run('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf)
    run('link', 'set', nsIf, 'netns', ns)
    run('addr', 'add', `${hostIP}/29`, 'dev', hostIf)
    run('link', 'set', hostIf, 'up')
    for (const a of [onceIP, denyIP, streamIP]) run('-n', ns, 'addr', 'add', `${a}/29`, 'dev', nsIf)
    run('-n', ns, 'link', 'set', nsIf, 'up')
    run('-n', ns, 'link', 'set', 'lo', 'up')
    run('-n', ns, 'route', 'add', 'default', 'via', hostIP)
    server = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', `
      for (const ip of ['${onceIP}', '${denyIP}', '${streamIP}']) {
        require('http').createServer((q, s) => s.end('hello from ' + ip + '\\n')).listen(${port}, ip)
      }`], { stdio: 'ignore' })
  })

  it('a create with a webhook hook placed by the api tier: echoed, held, allowed, denied; then the stream through PUT', { timeout: TEST_TIMEOUT * 3 }, async () => {
    const network = { denyOut: ['0.0.0.0/0'], approval: { webhook: { url: hookURL, secret }, timeoutMs: 5000 } }
    const r = await api(LB, 'POST', '/v2/sandboxes', { templateID: 'base', timeout: 300, metadata: t.metadata, network }, 120_000)
    assert.equal(r.status, 201, r.text)
    assert.ok(r.node, 'no X-Airlock-Node on the create answer')
    assert.ok(!r.text.includes(secret), 'the create answer holds the hook secret')
    const sandboxId = t.add(r.body.sandboxID)
    for (const base of [API1, API2]) {
      const info = await api(base, 'GET', `/sandboxes/${sandboxId}`)
      assert.equal(info.status, 200, info.text)
      assert.deepEqual(info.body.network?.approval, { webhook: { url: hookURL }, timeoutMs: 5000, onTimeout: 'deny' }, `GET /sandboxes/{id} through ${base}: ${info.text}`)
      assert.ok(!info.text.includes(secret), `GET through ${base} holds the hook secret`)
    }

    const sbx = await Sandbox.connect(sandboxId, via(LB))
    await waitUntil(async () => (await sh(sbx, 'true')).exitCode === 0, 30_000)
    const once = await curl(sbx, onceIP)
    assert.equal(once.rc, 0, `held then allowed: ${once.out}`)
    assert.ok(once.out.includes(`hello from ${onceIP}`), once.out)
    assert.ok(once.secs >= 0.3, `connected after ${once.secs}s, before the hook's 300 ms answer`)
    assert.deepEqual(asked.filter((q) => q.address === onceIP), [{ address: onceIP, port, sandboxId, signed: true }])
    const deny = await curl(sbx, denyIP)
    assert.equal(deny.rc, 7, `denied: ${deny.out}; want connection refused (curl 7)`)
    assert.ok(deny.secs < 2, `denied: refused after ${deny.secs}s, not at once`)

    // The stream variant, set with PUT …/network through API2.
    const put = await api(API2, 'PUT', `/sandboxes/${sandboxId}/network`, { denyOut: ['0.0.0.0/0'], approval: { stream: true, timeoutMs: 20_000 } })
    assert.equal(put.status, 204, put.text)
    const info = await api(API1, 'GET', `/sandboxes/${sandboxId}`)
    assert.deepEqual(info.body.network?.approval, { stream: true, timeoutMs: 20_000, onTimeout: 'deny' }, info.text)

    // The stream through the balancer, idle for longer than a short proxy
    // timeout would allow, then asked about a held connection.
    const stream = approvals(LB, sandboxId)
    try {
      assert.ok(await waitUntil(() => stream.status() === 200, 10_000), `the stream answered ${stream.status()}`)
      await sleep(35_000)
      const nAsked = asked.length
      const held = curl(sbx, streamIP)
      assert.ok(await waitUntil(() => stream.got.length > 0, 15_000, 100), 'no question on the stream while the connection is held (buffered, or the stream closed)')
      const q = stream.got[0]
      assert.equal(q.address, streamIP, JSON.stringify(q))
      assert.equal(q.sandboxId, sandboxId)
      const ans = await api(API1, 'POST', `/sandboxes/${sandboxId}/network/approvals/${q.decisionId}`, { decision: 'allow' })
      assert.equal(ans.status, 204, ans.text)
      const c = await held
      assert.equal(c.rc, 0, `allowed on the stream: ${c.out}`)
      assert.ok(c.out.includes(`hello from ${streamIP}`), c.out)
      assert.equal(asked.length, nAsked, 'the webhook was asked after the hook became a stream')
      const again = await api(API2, 'POST', `/sandboxes/${sandboxId}/network/approvals/${q.decisionId}`, { decision: 'deny' })
      assert.equal(again.status, 404, `a second answer: ${again.text}`)
    } finally {
      await stream.stop()
    }
  })
  // The hook lives with the sandbox's record (its secret sealed with the
  // key every node shares): a drain moves the sandbox through the artifact
  // store, and the node it lands on holds its connections and asks the
  // same webhook, signed with the same secret.
  it('a drain moves a sandbox with a hook: the new node holds and asks', { timeout: TEST_TIMEOUT * 3, skip: !ARTIFACTS && 'the cluster has no artifact store (run-cluster.sh --artifacts)' }, async () => {
    const network = { denyOut: ['0.0.0.0/0'], approval: { webhook: { url: hookURL, secret }, timeoutMs: 5000 } }
    const r = await api(LB, 'POST', '/v2/sandboxes', { templateID: 'base', timeout: 300, metadata: t.metadata, network }, 120_000)
    assert.equal(r.status, 201, r.text)
    const sandboxId = t.add(r.body.sandboxID)
    const from = r.node
    const d = await drainNode(from)
    assert.equal(d.status, 200, d.text)
    const w = await where(sandboxId)
    assert.ok(w.node && w.node !== from, `after draining ${from} the sandbox is on ${w.node}`)
    const sbx = await Sandbox.connect(sandboxId, via(LB))
    const n = asked.length
    const once = await curl(sbx, onceIP)
    assert.equal(once.rc, 0, `held then allowed on ${w.node}: ${once.out}`)
    assert.ok(once.secs >= 0.3, `connected after ${once.secs}s on ${w.node}, without waiting for the hook`)
    const deny = await curl(sbx, denyIP)
    assert.equal(deny.rc, 7, `denied on ${w.node}: ${deny.out}`)
    assert.deepEqual(asked.slice(n), [{ address: onceIP, port, sandboxId, signed: true }, { address: denyIP, port, sandboxId, signed: true }])
    const info = await api(API2, 'GET', `/sandboxes/${sandboxId}`)
    assert.deepEqual(info.body.network?.approval, { webhook: { url: hookURL }, timeoutMs: 5000, onTimeout: 'deny' }, info.text)
  })
})
