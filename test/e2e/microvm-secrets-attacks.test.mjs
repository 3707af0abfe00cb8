// Issue 29's attack list on the microVM runtime (scripts/test-microvm.sh),
// as test/gohttp/secrets_attacks_test.go runs it on gVisor: a guest with a
// rule injecting a secret for secrets-a.test (A) tries to make the node's
// egress proxy hand it to anyone else: a redirect to another domain, a
// CNAME (and another name or address for A's), HTTP/2 with an :authority
// other than the TLS name, HTTP/1.1 request smuggling (CL.TE, TE.CL, …), a
// WebSocket upgrade followed by a second request (in the tunnel, and after
// an upgrade the server refused), and plain HTTP. The guest's frames take
// the microVM's path (TAP → the sandbox namespace's eth0 by tc, then the
// same nftables steering as gVisor's). Every check reads the stand-in
// servers' own records: only A, under its own name, may ever have received
// the secret, and A's raw bytes (after TLS) hold it exactly as often as A
// parsed a request carrying it. One sandbox serves every attack (TCG is
// slow). The stand-in internet is microvm-secrets.test.mjs's /29 (<ext>.24,
// its DNS server on <ext>.28, the daemon's --dns-upstream); the files run
// one after the other.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createInterface } from 'node:readline'
import { Sandbox } from 'e2b'
import { uniq, sh, sleep, waitUntil } from './helpers.mjs'
import { dnsServer, resolveA } from './standin.mjs'

const T = 300_000
const A = 'secrets-a.test'
const B = 'secrets-b.test'
const D = 'secrets-d.test' // a CNAME to A
const E = 'secrets-e.test' // an A record of A's address

/** Raw REST (this SDK version sends no network.rules, and has no /secrets). */
async function api (method, path, body) {
  const res = await fetch(`${process.env.E2B_API_URL}${path}`, {
    method, headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' }, body: body && JSON.stringify(body)
  })
  return { status: res.status, body: await res.text() }
}

// The stand-in servers, run by node in the test namespace. A (TLS on :443)
// records every byte it reads after TLS ({raw}) and hands the stream to
// an HTTP server on loopback; B is HTTPS; A-plain is HTTP on A's :80. Each
// parsed request is a {seen} line; /redirect?to=URL answers a 302, /ws is
// a WebSocket that says hello and echoes text frames ({frame}), and bytes
// in the tunnel that are no frame end it ({junk}). An upgrade to any other
// path is answered 200 and the connection stays HTTP.
function standInServers (caDir, ipA, ipB) {
  const fs = require('fs')
  const tls = require('tls')
  const net = require('net')
  const http = require('http')
  const https = require('https')
  const crypto = require('crypto')
  const cert = { cert: fs.readFileSync(`${caDir}/leaf.pem`), key: fs.readFileSync(`${caDir}/leaf.key`), ALPNProtocols: ['http/1.1'] }
  const out = (o) => process.stdout.write(JSON.stringify(o) + '\n')
  let seen = 0
  const record = (name, q, bodyLen) => {
    out({ seen: { server: name, host: q.headers.host ?? null, path: q.url.split('?')[0], proto: `HTTP/${q.httpVersion}`, authorization: q.headers.authorization ?? null, upgrade: q.headers.upgrade ?? null, bodyLen } })
    return seen++
  }
  const onRequest = (name) => (q, s) => {
    let n = 0
    q.on('data', (d) => { n += d.length })
    q.on('end', () => {
      record(name, q, n)
      if (q.url.startsWith('/redirect')) {
        s.writeHead(302, { Location: new URL(q.url, 'http://x').searchParams.get('to') })
        s.end()
        return
      }
      s.end(JSON.stringify({ server: name, host: q.headers.host, proto: `HTTP/${q.httpVersion}`, authorization: q.headers.authorization ?? null }))
    })
  }
  const app = (name) => {
    const plain = http.createServer(onRequest(name)) // no upgrade listener: an Upgrade request is an ordinary one
    const srv = http.createServer(onRequest(name))
    srv.on('upgrade', (q, sock, head) => {
      if (!q.url.startsWith('/ws') || (q.headers.upgrade ?? '').toLowerCase() !== 'websocket') {
        // Refused: 200, and the connection goes on as HTTP.
        record(name, q, 0)
        const body = JSON.stringify({ server: name, upgrade: 'refused' })
        sock.write(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`)
        if (head.length) sock.unshift(head)
        plain.emit('connection', sock)
        return
      }
      const i = record(name, q, 0)
      const accept = crypto.createHash('sha1').update(q.headers['sec-websocket-key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64')
      sock.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`)
      const frame = (p) => { const b = Buffer.from(p); return Buffer.concat([Buffer.from([0x81, b.length]), b]) }
      sock.write(frame(`hello from ${name}`))
      let buf = head
      const parse = () => {
        while (buf.length >= 2) {
          const op = buf[0] & 0x0f
          const len = buf[1] & 0x7f
          if ((buf[0] & 0x70) || !(buf[1] & 0x80) || ![1, 8].includes(op) || len > 125) {
            out({ junk: { i, data: buf.toString('latin1') } })
            sock.destroy()
            return
          }
          if (buf.length < 6 + len) return
          const mask = buf.subarray(2, 6)
          const data = Buffer.from(buf.subarray(6, 6 + len).map((b, j) => b ^ mask[j % 4])).toString()
          buf = buf.subarray(6 + len)
          if (op === 8) { sock.end(); return }
          out({ frame: { i, data } })
          sock.write(frame(`echo:${data}`))
        }
      }
      sock.on('data', (d) => { buf = Buffer.concat([buf, d]); parse() })
      sock.on('error', () => {})
      parse()
    })
    return srv
  }
  const a = app('A').listen(0, '127.0.0.1', () => {
    let conn = 0
    tls.createServer(cert, (c) => {
      const id = conn++
      const up = net.connect(a.address().port, '127.0.0.1')
      c.on('data', (d) => out({ raw: { conn: id, data: d.toString('base64') } }))
      c.pipe(up).pipe(c)
      c.on('error', () => up.destroy())
      up.on('error', () => c.destroy())
    }).listen(443, ipA)
  })
  app('A-plain').listen(80, ipA)
  const b = app('B')
  https.createServer(cert).on('request', (q, s) => b.emit('request', q, s)).on('upgrade', (q, s, h) => b.emit('upgrade', q, s, h)).listen(443, ipB)
}

// The guest's clients, shared with test/gohttp's attack tests (test/guest:
// ws.py upgrades https://HOST/ws and talks WebSocket, optionally writing
// bytes into the tunnel; rawtls.py writes a payload over TLS with the ALPN
// protocols given and prints what it reads).
const wsPy = readFileSync(new URL('../guest/ws.py', import.meta.url), 'utf8')
const rawPy = readFileSync(new URL('../guest/rawtls.py', import.meta.url), 'utf8')

/** An HTTP/2 client's first bytes: preface, SETTINGS, HEADERS (stream 1) for GET https://authority/path, HPACK literals. */
function h2Request (authority, path) {
  const block = []
  for (const [k, v] of [[':method', 'GET'], [':scheme', 'https'], [':path', path], [':authority', authority]]) {
    block.push(0, k.length, ...Buffer.from(k), v.length, ...Buffer.from(v))
  }
  return Buffer.concat([
    Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'),
    Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]),
    Buffer.from([block.length >> 16, (block.length >> 8) & 0xff, block.length & 0xff, 1, 5, 0, 0, 0, 1]),
    Buffer.from(block)
  ])
}

/** The HTTP/1.1 status codes in what a raw client read. */
const statuses = (s) => [...s.matchAll(/HTTP\/1\.1 ([0-9]{3}) /g)].map((m) => m[1]).join(' ')
const b64 = (s) => Buffer.from(s).toString('base64')

describe('microVM: the secrets proxy attack list', { timeout: T * 8 }, () => {
  const id = uniq().slice(0, 6)
  const ns = `e2e-vmsa-${id}`
  const hostIf = `e2va${id}`
  const nsIf = `e2vb${id}`
  const ext = process.env.AIRLOCK_E2E_EXT_NET ?? '10.78.255'
  const hostIP = `${ext}.25`
  const ipA = `${ext}.26`
  const ipB = `${ext}.27`
  const ipDNS = `${ext}.28`
  const caDir = process.env.AIRLOCK_E2E_UPSTREAM_CA_DIR
  const secretName = `vma-${id}-${uniq()}`
  const value = `vma-secret-${uniq()}-VALUE`
  const seen = [] // what the servers parsed, in order
  const raw = new Map() // A's connection id → every byte it read after TLS
  const junk = [] // bytes in a WebSocket tunnel that were no frame
  const run = (...args) => execFileSync('ip', args, { stdio: 'pipe' })
  let server
  let sbx

  before(async () => {
    assert.ok(caDir, 'AIRLOCK_E2E_UPSTREAM_CA_DIR is not set (scripts/test-microvm.sh makes the upstream CA)')
    run('netns', 'add', ns)
    run('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf)
    run('link', 'set', nsIf, 'netns', ns)
    run('addr', 'add', `${hostIP}/29`, 'dev', hostIf)
    run('link', 'set', hostIf, 'up')
    for (const a of [ipA, ipB, ipDNS]) run('-n', ns, 'addr', 'add', `${a}/29`, 'dev', nsIf)
    run('-n', ns, 'link', 'set', nsIf, 'up')
    run('-n', ns, 'link', 'set', 'lo', 'up')
    run('-n', ns, 'route', 'add', 'default', 'via', hostIP)
    server = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', `
      ${standInServers.toString()}
      standInServers(${JSON.stringify(caDir)}, '${ipA}', '${ipB}')
      ${dnsServer.toString()}
      dnsServer('${ipDNS}', { '${A}': '${ipA}', '${B}': '${ipB}', '${D}': { cname: '${A}' }, '${E}': '${ipA}' })`], { stdio: ['ignore', 'pipe', 'inherit'] })
    createInterface({ input: server.stdout }).on('line', (l) => {
      let m
      try { m = JSON.parse(l) } catch { return }
      if (m.seen) seen.push({ ...m.seen, frames: [] })
      if (m.frame) seen[m.frame.i].frames.push(m.frame.data)
      if (m.junk) junk.push(m.junk.data)
      if (m.raw) raw.set(m.raw.conn, Buffer.concat([raw.get(m.raw.conn) ?? Buffer.alloc(0), Buffer.from(m.raw.data, 'base64')]))
    })
    const up = await waitUntil(async () => (await resolveA(ipDNS, D)) === ipA, 10_000)
    assert.ok(up, 'test servers in the external namespace did not start')

    const made = await api('POST', '/secrets', { name: secretName, value })
    assert.equal(made.status, 201, made.body)
    const r = await api('POST', '/sandboxes', {
      templateID: 'base', timeout: 900,
      network: { rules: { [A]: [{ transform: { headers: { Authorization: `Bearer \${e2b.secrets.${secretName}}` } } }] } }
    })
    assert.equal(r.status, 201, r.body)
    sbx = await Sandbox.connect(JSON.parse(r.body).sandboxID)
    await sbx.files.write('/tmp/ws.py', wsPy)
    await sbx.files.write('/tmp/raw.py', rawPy)
  }, { timeout: T * 2 })

  after(async () => {
    if (sbx) await Sandbox.kill(sbx.sandboxId).catch(() => {})
    await api('DELETE', `/secrets/${secretName}`).catch(() => {})
    server?.kill('SIGKILL')
    await sleep(200)
    try { run('link', 'del', hostIf) } catch {}
    try { run('netns', 'del', ns) } catch {}
  })

  const cmd = (c) => sh(sbx, c, { timeoutMs: 180_000 })
  const curl = (args) => cmd(`curl -sS -m 60 -w '\\n%{http_code}' ${args}`)
  const rawReq = (payload, alpn = 'http/1.1') => cmd(`python3 /tmp/raw.py ${A} ${b64(payload)} ${alpn}`)
  const carries = (q) => (q.authorization ?? '').includes(value)
  // The requests that may carry the secret: A's, for A, over HTTP/1.1.
  const legit = (q) => q.server === 'A' && q.host === A && q.proto === 'HTTP/1.1'
  const since = (n) => seen.slice(n)
  /** The invariant over everything the servers recorded. */
  const holds = async (when) => {
    await sleep(500) // the servers' last lines
    const carrying = seen.filter(carries)
    assert.deepEqual(carrying.filter((q) => !legit(q)), [], `${when}: the secret reached another server, host or protocol`)
    let onWire = 0
    for (const b of raw.values()) onWire += b.toString('latin1').split(value).length - 1
    assert.equal(onWire, carrying.length, `${when}: A read the secret ${onWire} times on the wire but parsed ${carrying.length} requests carrying it`)
    assert.deepEqual(seen.filter((q) => q.path === '/hidden'), [], `${when}: a hidden request reached a server`)
    assert.ok(!junk.some((j) => j.includes(value)), `${when}: the secret went into a WebSocket tunnel`)
  }

  it('the rule works: A gets the secret', { timeout: T }, async () => {
    const n = seen.length
    const r = await curl(`https://${A}/headers`)
    await sleep(300)
    assert.equal(r.exitCode, 0, r.stderr)
    assert.equal(since(n).length, 1, JSON.stringify(since(n)))
    assert.ok(legit(since(n)[0]) && carries(since(n)[0]), JSON.stringify(since(n)))
    await holds('first request')
  })

  it('redirect to another domain: the proxy follows nothing, B never gets the secret', { timeout: T }, async () => {
    const to = `https://${B}/headers`
    let n = seen.length
    let r = await curl(`'https://${A}/redirect?to=${to}'`)
    await sleep(300)
    assert.ok(r.stdout.trim().endsWith('302'), JSON.stringify(r))
    assert.deepEqual(since(n).map((q) => [q.server, q.path]), [['A', '/redirect']])
    n = seen.length
    r = await curl(`-k -L 'https://${A}/redirect?to=${to}'`)
    await sleep(300)
    assert.equal(r.exitCode, 0, r.stderr)
    assert.match(r.stdout, /"server":"B"/)
    const got = since(n)
    assert.deepEqual(got.map((q) => [q.server, carries(q)]), [['A', true], ['B', false]], JSON.stringify(got))
    await holds('redirect')
  })

  it("a CNAME, another name or the address of A: relayed untouched (A's own certificate), no secret", { timeout: T * 2 }, async () => {
    for (const args of [`https://${D}/headers`, `https://${E}/headers`, `--resolve ${D}:443:${ipA} https://${D}/headers`]) {
      const n = seen.length
      const r = await curl(`-v -k ${args}`)
      await sleep(300)
      assert.equal(r.exitCode, 0, `${args}: ${r.stderr}`)
      assert.deepEqual(since(n).map((q) => [q.server, carries(q)]), [['A', false]], `${args}: ${JSON.stringify(since(n))}`)
      assert.match(r.stderr, /airlock-e2e-upstream-ca/, `${args}: the certificate is not A's own (intercepted?)`)
    }
    // The ruled name at B's address (not steered): no proxy, no secret.
    const n = seen.length
    const r = await curl(`-k --resolve ${A}:443:${ipB} https://${A}/headers`)
    await sleep(300)
    assert.equal(r.exitCode, 0, r.stderr)
    assert.deepEqual(since(n).map((q) => [q.server, carries(q)]), [['B', false]])
    await holds('cname')
  })

  it('HTTP/2: only http/1.1 is offered; another :authority never reaches a server', { timeout: T * 2 }, async () => {
    let n = seen.length
    let r = await curl(`--http2 -v https://${A}/headers`)
    await sleep(300)
    assert.equal(r.exitCode, 0, r.stderr)
    assert.match(r.stderr, /ALPN: server accepted http\/1\.1/)
    assert.ok(since(n).length === 1 && legit(since(n)[0]) && carries(since(n)[0]), JSON.stringify(since(n)))
    for (const flag of ['--http2', '--http2-prior-knowledge']) {
      n = seen.length
      r = await curl(`${flag} -H 'Host: ${B}' https://${A}/headers`)
      await sleep(300)
      assert.deepEqual(since(n), [], `${flag} with :authority ${B}: ${JSON.stringify(r)}`)
      assert.ok(!r.stdout.trim().endsWith('200'), `${flag} with :authority ${B}: ${JSON.stringify(r)}`)
    }
    r = await cmd(`python3 /tmp/raw.py ${A} ${b64('x')} h2`)
    assert.equal(r.exitCode, 3, `TLS offering only h2: ${JSON.stringify(r)}`)
    n = seen.length
    r = await cmd(`python3 /tmp/raw.py ${A} ${h2Request(B, '/headers').toString('base64')} -`)
    await sleep(300)
    assert.deepEqual(since(n), [], `raw HTTP/2 with :authority ${B}: ${JSON.stringify(r)}`)
    assert.match(r.stdout, /HTTP\/1\.1 4/, `raw HTTP/2 with :authority ${B}: ${JSON.stringify(r)}`)
    await holds('http2')
  })

  it('HTTP/1.1 request smuggling: a hidden request never reaches a server', { timeout: T * 3 }, async () => {
    const hidden = `GET /hidden HTTP/1.1\r\nHost: ${B}\r\n\r\n`
    const chunk = `${hidden.length.toString(16)}\r\n${hidden}\r\n0\r\n\r\n`
    const cases = [
      ['CL.TE', `POST /smuggle HTTP/1.1\r\nHost: ${A}\r\nContent-Length: ${('0\r\n\r\n' + hidden).length}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${hidden}`, '200 421'],
      ['TE.CL', `POST /smuggle HTTP/1.1\r\nHost: ${A}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n${chunk}`, '200'],
      ['CL.CL', `POST /smuggle HTTP/1.1\r\nHost: ${A}\r\nContent-Length: 0\r\nContent-Length: ${hidden.length}\r\n\r\n${hidden}`, '400'],
      ['TE-obfuscated', `POST /smuggle HTTP/1.1\r\nHost: ${A}\r\nContent-Length: ${hidden.length}\r\nTransfer-Encoding: xchunked\r\n\r\n${hidden}`, '400'],
      ['pipelined', `GET /first HTTP/1.1\r\nHost: ${A}\r\n\r\n${hidden}`, '200 421']
    ]
    for (const [name, req, want] of cases) {
      const n = seen.length
      const r = await rawReq(req)
      await sleep(300)
      for (const q of since(n)) assert.ok(q.server === 'A' && q.host === A && q.path !== '/hidden', `${name}: a hidden request reached a server: ${JSON.stringify(q)}`)
      assert.equal(r.exitCode, 0, `${name}: ${JSON.stringify(r)}`)
      assert.equal(statuses(r.stdout), want, `${name}: ${JSON.stringify(r)}`)
    }
    await holds('smuggling')
  })

  it('WebSocket: frames both ways with A; a second request afterwards stays in the tunnel or is refused', { timeout: T * 2 }, async () => {
    let n = seen.length
    let r = await cmd(`python3 /tmp/ws.py ${A} 3 verify`)
    await sleep(300)
    assert.equal(r.stdout, 'status HTTP/1.1 101 Switching Protocols\nrecv hello from A\nrecv echo:frame-0\nrecv echo:frame-1\nrecv echo:frame-2\n', JSON.stringify(r))
    assert.equal(since(n).length, 1)
    assert.ok(legit(since(n)[0]) && carries(since(n)[0]), JSON.stringify(since(n)))
    assert.deepEqual(since(n)[0].frames, ['frame-0', 'frame-1', 'frame-2'])
    // A second request in the upgraded tunnel (for A, then for B): relayed
    // as opaque bytes to A's WebSocket, never parsed or given the secret.
    n = seen.length
    const before = junk.length
    r = await cmd(`python3 /tmp/ws.py ${A} 0 verify ${b64(`GET /tunnel HTTP/1.1\r\nHost: ${A}\r\n\r\nGET /tunnel HTTP/1.1\r\nHost: ${B}\r\n\r\n`)}`)
    await sleep(500)
    assert.match(r.stdout, /recv hello from A\nafter/, JSON.stringify(r))
    assert.deepEqual(since(n).map((q) => [q.server, q.path, carries(q)]), [['A', '/ws', true]], JSON.stringify(since(n)))
    assert.equal(junk.length, before + 1, 'A did not get the second request as tunnel bytes')
    assert.ok(junk.at(-1).startsWith(`GET /tunnel HTTP/1.1\r\nHost: ${A}\r\n\r\n`) && !junk.at(-1).includes('Authorization'), JSON.stringify(junk.at(-1)))
    // An upgrade A refuses (200): the connection stays HTTP through the
    // proxy, so a pipelined request for B after it gets 421, unsent.
    n = seen.length
    r = await rawReq(`GET /headers HTTP/1.1\r\nHost: ${A}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ${b64('0123456789abcdef')}\r\nSec-WebSocket-Version: 13\r\n\r\n` +
      `GET /hidden HTTP/1.1\r\nHost: ${B}\r\n\r\n`)
    await sleep(300)
    assert.equal(statuses(r.stdout), '200 421', JSON.stringify(r))
    assert.deepEqual(since(n).map((q) => [q.server, q.path, q.upgrade, carries(q)]), [['A', '/headers', 'websocket', true]], JSON.stringify(since(n)))
    // To B (no rule): works, untouched.
    n = seen.length
    r = await cmd(`python3 /tmp/ws.py ${B} 1 insecure`)
    await sleep(300)
    assert.match(r.stdout, /recv hello from B\nrecv echo:frame-0/, JSON.stringify(r))
    assert.deepEqual(since(n).map((q) => [q.server, carries(q)]), [['B', false]])
    await holds('websocket')
  })

  it('plain HTTP to the ruled name: relayed untouched to A:80, no secret (no downgrade)', { timeout: T }, async () => {
    const n = seen.length
    const r = await curl(`http://${A}/headers`)
    await sleep(300)
    assert.equal(r.exitCode, 0, r.stderr)
    assert.match(r.stdout, /"server":"A-plain"/)
    assert.deepEqual(since(n).map((q) => [q.server, carries(q)]), [['A-plain', false]])
    await holds('downgrade')
  })
})
