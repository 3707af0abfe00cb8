// Issue 28 part 3 on the microVM runtime (scripts/test-microvm.sh): the
// egress approval hook in front of a QEMU guest. The guest's frames reach
// the host through the TAP → eth0 tc redirect and the sandbox's veth, where
// the same egress chain as gVisor's holds a new TCP connection in the
// NFQUEUE until the hook answers (internal/network/approval_linux.go). A
// network namespace we own stands in for the internet at <ext>.40/29 (the
// stage's daemon opens it with --deny-out-except): the webhook receiver on
// <ext>.42 and one HTTP server per destination. The sandbox is a raw REST
// create with network.approval and denyOut 0.0.0.0/0 (this SDK version
// sends no approval), then Sandbox.connect; a second one is a plain create
// (served by the warm pool) given the stream variant with PUT …/network.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { Sandbox } from 'e2b'
import { uniq, sh, sleep, waitUntil } from './helpers.mjs'

const T = 300_000
const TIMEOUT_MS = 3000 // the hook's deadline: slack for an emulated guest

async function api (method, path, body) {
  const res = await fetch(`${process.env.E2B_API_URL}${path}`, {
    method, headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' }, body: body && JSON.stringify(body)
  })
  return { status: res.status, body: await res.text() }
}

describe('microVM: the egress approval hook', { timeout: T * 4 }, () => {
  const id = uniq().slice(0, 6)
  const ns = `e2e-vmap-${id}`
  const hostIf = `e2va${id}`
  const nsIf = `e2vb${id}`
  const ext = process.env.AIRLOCK_E2E_EXT_NET ?? '10.78.255'
  const hostIP = `${ext}.41`
  const hookIP = `${ext}.42`
  const onceIP = `${ext}.43`
  const denyIP = `${ext}.44`
  const muteIP = `${ext}.45`
  const secret = `hook-${uniq()}`
  const port = 8089
  const asked = [] // every question the webhook got: {address, port, signed}
  const run = (...args) => execFileSync('ip', args, { stdio: 'pipe' })
  let server
  let sbx

  before(async () => {
    run('netns', 'add', ns)
    run('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf)
    run('link', 'set', nsIf, 'netns', ns)
    run('addr', 'add', `${hostIP}/29`, 'dev', hostIf)
    run('link', 'set', hostIf, 'up')
    for (const a of [hookIP, onceIP, denyIP, muteIP]) run('-n', ns, 'addr', 'add', `${a}/29`, 'dev', nsIf)
    run('-n', ns, 'link', 'set', nsIf, 'up')
    run('-n', ns, 'link', 'set', 'lo', 'up')
    run('-n', ns, 'route', 'add', 'default', 'via', hostIP)
    // The destinations, and the webhook: allow after 300 ms, deny at once,
    // no answer (past the deadline) for the third. Each question is logged
    // as a JSON line with whether its signature checks out.
    server = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', `
      const http = require('http')
      for (const ip of ['${onceIP}', '${denyIP}', '${muteIP}']) {
        http.createServer((q, s) => s.end('hello from ' + ip + '\\n')).listen(${port}, ip)
      }
      http.createServer((q, s) => {
        const chunks = []
        q.on('data', (c) => chunks.push(c))
        q.on('end', () => {
          const body = Buffer.concat(chunks)
          const want = ${signature.toString()}
          let d = {}
          try { d = JSON.parse(body) } catch {}
          console.log(JSON.stringify({ address: d.address, port: d.port, sandboxId: d.sandboxId, signed: q.headers['e2b-signature'] === want('${secret}', body) }))
          if (d.address === '${onceIP}') setTimeout(() => s.end('{"decision":"allow"}'), 300)
          else if (d.address === '${denyIP}') s.end('{"decision":"deny"}')
          else setTimeout(() => { s.statusCode = 503; s.end() }, ${TIMEOUT_MS + 3000})
        })
      }).listen(${port}, '${hookIP}', () => console.log('{"ready":true}'))`], { stdio: ['ignore', 'pipe', 'inherit'] })
    let ready = false
    createInterface({ input: server.stdout }).on('line', (l) => {
      try {
        const j = JSON.parse(l)
        if (j.ready) ready = true
        else asked.push(j)
      } catch {}
    })
    assert.ok(await waitUntil(() => ready, 10_000), 'the webhook receiver in the external namespace did not start')

    const r = await api('POST', '/sandboxes', {
      templateID: 'code-interpreter-v1', timeout: 600,
      network: {
        denyOut: ['0.0.0.0/0'],
        approval: { webhook: { url: `http://${hookIP}:${port}/approve`, secret }, timeoutMs: TIMEOUT_MS }
      }
    })
    assert.equal(r.status, 201, r.body)
    assert.ok(!r.body.includes(secret), 'the create response holds the hook secret')
    sbx = await Sandbox.connect(JSON.parse(r.body).sandboxID)
  }, { timeout: T * 2 })

  after(async () => {
    if (sbx) await Sandbox.kill(sbx.sandboxId).catch(() => {})
    server?.kill('SIGKILL')
    await sleep(200)
    try { run('link', 'del', hostIf) } catch {}
    try { run('netns', 'del', ns) } catch {}
  })

  // curl's own connect time (an emulated guest is slow to start a process):
  // "<exit> <seconds>" then the body or error.
  const curl = async (ip, box = sbx) => {
    const r = await sh(box, `curl -sS -m 20 -o /tmp/out -w '%{time_total}' http://${ip}:${port}/ 2>/tmp/err; rc=$?; echo " $rc"; cat /tmp/out /tmp/err 2>/dev/null; true`, { timeoutMs: 120_000 })
    const [secs, rc] = r.stdout.trim().split('\n')[0].trim().split(/\s+/)
    return { rc: Number(rc), secs: Number(secs), out: r.stdout }
  }
  const askedOf = (ip) => asked.filter((q) => q.address === ip)

  it('GET echoes the hook (its url, never its secret)', async () => {
    const r = await api('GET', `/sandboxes/${sbx.sandboxId}`)
    assert.equal(r.status, 200, r.body)
    assert.ok(r.body.includes(`http://${hookIP}:${port}/approve`), r.body)
    assert.ok(!r.body.includes(secret), `GET holds the hook secret: ${r.body}`)
  })

  it('a new destination waits for the hook, then connects', { timeout: T }, async () => {
    const r = await curl(onceIP)
    assert.equal(r.rc, 0, `held then allowed: ${r.out}`)
    assert.match(r.out, new RegExp(`hello from ${onceIP.replaceAll('.', '\\.')}`))
    assert.ok(r.secs >= 0.3, `connected after ${r.secs}s, before the hook's 300 ms answer`)
    const q = askedOf(onceIP)
    assert.equal(q.length, 1, `questions about ${onceIP}: ${JSON.stringify(asked)}`)
    assert.deepEqual(q[0], { address: onceIP, port, sandboxId: sbx.sandboxId, signed: true })
    console.log(`held then allowed: ${r.secs}s`)
  })

  it('a deny is refused at once', { timeout: T }, async () => {
    const r = await curl(denyIP)
    assert.equal(r.rc, 7, `denied: ${r.out}; want connection refused (curl 7)`)
    assert.ok(r.secs < 1.5, `denied: refused after ${r.secs}s, not at once`)
    assert.equal(askedOf(denyIP).length, 1, JSON.stringify(asked))
    console.log(`denied: refused after ${r.secs}s`)
  })

  it('no answer is refused after timeoutMs', { timeout: T }, async () => {
    const r = await curl(muteIP)
    assert.equal(r.rc, 7, `unanswered: ${r.out}; want connection refused (curl 7)`)
    // The guest's clock under TCG runs a little behind the host's.
    assert.ok(r.secs >= TIMEOUT_MS / 1000 * 0.8 && r.secs < TIMEOUT_MS / 1000 + 4, `unanswered: refused after ${r.secs}s; want about ${TIMEOUT_MS} ms`)
    assert.ok(askedOf(muteIP).length >= 1, JSON.stringify(asked))
    console.log(`unanswered: refused after ${r.secs}s`)
  })

  it('after pause and resume the hold is back: asked again, allowed and denied', { timeout: T }, async () => {
    assert.equal(await sbx.pause(), true)
    sbx = await Sandbox.connect(sbx.sandboxId)
    const n = asked.length
    const ok = await curl(onceIP)
    assert.equal(ok.rc, 0, `allowed after resume: ${ok.out}`)
    assert.ok(ok.secs >= 0.3, `connected after ${ok.secs}s without waiting for the hook`)
    const no = await curl(denyIP)
    assert.equal(no.rc, 7, `denied after resume: ${no.out}`)
    assert.deepEqual(asked.slice(n).map((q) => q.address), [onceIP, denyIP], 'questions after resume')
  })

  // A plain create (the warm pool's VM when it holds one), then PUT
  // …/network with the stream variant: the question comes on GET
  // …/network/approvals (server-sent events), the answer by POST.
  it('the stream variant, set with PUT …/network: asked on the stream, answered by POST', { timeout: T }, async () => {
    const plain = await Sandbox.create('code-interpreter-v1', { timeoutMs: 300_000 })
    const ctl = new AbortController()
    try {
      const put = await api('PUT', `/sandboxes/${plain.sandboxId}/network`, { denyOut: ['0.0.0.0/0'], approval: { stream: true, timeoutMs: 20_000 } })
      assert.equal(put.status, 204, put.body)
      const res = await fetch(`${process.env.E2B_API_URL}/sandboxes/${plain.sandboxId}/network/approvals`, { headers: { 'X-API-Key': process.env.E2B_API_KEY }, signal: ctl.signal })
      assert.equal(res.status, 200)
      const got = []
      ;(async () => {
        const dec = new TextDecoder()
        let buf = ''
        for await (const chunk of res.body) {
          buf += dec.decode(chunk, { stream: true })
          let i
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const data = buf.slice(0, i).split('\n').find((l) => l.startsWith('data: '))
            buf = buf.slice(i + 2)
            if (!data) continue
            const q = JSON.parse(data.slice(6))
            got.push(q)
            const decision = q.address === onceIP ? 'allow' : 'deny'
            await api('POST', `/sandboxes/${plain.sandboxId}/network/approvals/${q.decisionId}`, { decision })
          }
        }
      })().catch(() => {})
      const n = asked.length
      const ok = await curl(onceIP, plain)
      assert.equal(ok.rc, 0, `allowed on the stream: ${ok.out}`)
      assert.match(ok.out, /hello from/)
      const no = await curl(denyIP, plain)
      assert.equal(no.rc, 7, `denied on the stream: ${no.out}`)
      assert.ok(no.secs < 5, `denied on the stream: refused after ${no.secs}s, not at the 20 s deadline`)
      assert.deepEqual(got.map((q) => [q.address, q.sandboxId]), [[onceIP, plain.sandboxId], [denyIP, plain.sandboxId]])
      assert.equal(asked.length, n, "the other sandbox's webhook was asked")
    } finally {
      ctl.abort()
      await Sandbox.kill(plain.sandboxId).catch(() => {})
    }
  })

  it('the decisions are in the egress log', async () => {
    const r = await api('GET', `/sandboxes/${sbx.sandboxId}/network/log`)
    assert.equal(r.status, 200, r.body)
    for (const want of [`"ip":"${denyIP}","port":${port}`, 'approval by webhook', 'approval by timeout']) {
      assert.ok(r.body.includes(want), `egress log lacks ${want}: ${r.body}`)
    }
  })
})

// The webhook signature (internal/webhooks.Sign: base64url of
// sha256(secret || body)), for the receiver.
function signature (secret, body) {
  return require('crypto').createHash('sha256').update(secret).update(body).digest('base64url')
}
