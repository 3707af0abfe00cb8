// Issue 29 on the microVM runtime (scripts/test-microvm.sh): E2B's
// network.egressProxy, a SOCKS5 upstream with RFC 1929 auth, in front of a
// QEMU guest. The guest's frames reach the host through the TAP → eth0 tc
// redirect and the sandbox's veth, where the same nftables steering as
// gVisor's DNATs its TCP to the node's SOCKS relay, which finds the sandbox
// by the guest's address (internal/network/doc.go, "Tunnelling through
// network.egressProxy"). A network namespace we own stands in for the
// internet: an HTTP server on A that answers with its peer's address, a
// SOCKS5 server with auth on B (it dials from B, so a proxied request's peer
// is B and a direct one's is the node), and a UDP sink on A. The
// stage's daemon opens <ext>.32/29 with --deny-out-except and lets
// egressProxy name a private address with --egress-proxy-allow-private. The
// sandbox is a code-interpreter-v1 create with an egressProxy while that
// template's warm pool holds a VM: it must not be served from the pool,
// whose VM's traffic is not steered (the daemon log says which path served
// it).
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { readFileSync } from 'node:fs'
import { Sandbox } from 'e2b'
import { uniq, sh, sleep, waitUntil } from './helpers.mjs'
import { socksServer } from './standin.mjs'

const T = 300_000
const LOG = process.env.AIRLOCK_TEST_VM_DAEMON_LOG

function log () {
  assert.ok(LOG, 'AIRLOCK_TEST_VM_DAEMON_LOG is not set (scripts/test-microvm.sh sets it)')
  return readFileSync(LOG, 'utf8').split('\n')
}

/** Whether the warm pool of code-interpreter-v1 holds an idle VM now. */
function poolIdle () {
  const last = log().filter((l) => /template=code-interpreter-v1/.test(l) && /msg="(warm pool: sandbox ready|sandbox created from the warm pool)"/.test(l)).at(-1) ?? ''
  return /warm pool: sandbox ready/.test(last)
}

describe('microVM: network.egressProxy (SOCKS5 with auth)', { timeout: T * 5 }, () => {
  const id = uniq().slice(0, 6)
  const ns = `e2e-vmsk-${id}`
  const hostIf = `e2vk${id}`
  const nsIf = `e2vl${id}`
  const ext = process.env.AIRLOCK_E2E_EXT_NET ?? '10.78.255'
  const hostIP = `${ext}.33`
  const ipA = `${ext}.34`
  const ipB = `${ext}.35`
  const user = 'airlock'
  const pass = `socks-${id}`
  const seen = [] // every line the stand-in servers logged: {udp} or {target}
  const run = (...args) => execFileSync('ip', args, { stdio: 'pipe' })
  let server
  let sbx

  const curl = async (url, seconds = 30) => {
    const r = await sh(sbx, `curl -sS -m ${seconds} ${url}`, { timeoutMs: (seconds + 60) * 1000 })
    return { ok: r.exitCode === 0, body: r.stdout, stderr: r.stderr }
  }
  /** Sends three UDP datagrams tagged tag to A:9999 from the guest; whether any arrived. */
  const udpLeaves = async (tag) => {
    await sh(sbx, `for i in 1 2 3; do printf '${tag}' >/dev/udp/${ipA}/9999; sleep 0.3; done; true`, { timeoutMs: 60_000 })
    await waitUntil(() => seen.some((s) => s.udp === tag), 3_000)
    return seen.some((s) => s.udp === tag)
  }
  const targets = () => seen.filter((s) => s.target).map((s) => s.target)

  before(async () => {
    assert.ok(await waitUntil(poolIdle, 240_000, 1_000), 'the warm pool of code-interpreter-v1 has no idle VM')
    run('netns', 'add', ns)
    run('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf)
    run('link', 'set', nsIf, 'netns', ns)
    run('addr', 'add', `${hostIP}/29`, 'dev', hostIf)
    run('link', 'set', hostIf, 'up')
    for (const a of [ipA, ipB]) run('-n', ns, 'addr', 'add', `${a}/29`, 'dev', nsIf)
    run('-n', ns, 'link', 'set', nsIf, 'up')
    run('-n', ns, 'link', 'set', 'lo', 'up')
    run('-n', ns, 'route', 'add', 'default', 'via', hostIP)
    server = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', `
      require('http').createServer((q, s) => s.end('peer ' + q.socket.remoteAddress)).listen(8081, '${ipA}')
      const u = require('dgram').createSocket('udp4')
      u.on('message', (m) => console.log(JSON.stringify({ udp: m.toString() })))
      u.bind(9999, '${ipA}')
      ${socksServer.toString()}
      socksServer('${ipB}', '${user}', '${pass}', { 'proxied.test': '${ipA}' })
      console.log(JSON.stringify({ up: true }))`], { stdio: ['ignore', 'pipe', 'inherit'] })
    createInterface({ input: server.stdout }).on('line', (l) => { try { seen.push(JSON.parse(l)) } catch {} })
    assert.ok(await waitUntil(() => seen.some((s) => s.up), 10_000), 'test servers in the external namespace did not start')

    sbx = await Sandbox.create('code-interpreter-v1', {
      timeoutMs: 600_000,
      network: { egressProxy: { address: `${ipB}:1080`, username: user, password: pass } }
    })
    const line = log().find((l) => l.includes(`sandbox=${sbx.sandboxId}`) && /msg="sandbox created/.test(l)) ?? ''
    assert.match(line, /sandbox created/, 'no "sandbox created" line in the daemon log')
    assert.doesNotMatch(line, /from the warm pool/, 'a create with an egressProxy took the pooled VM (set up without the steering)')
  }, { timeout: T * 2 })

  after(async () => {
    if (sbx) await Sandbox.kill(sbx.sandboxId).catch(() => {})
    server?.kill('SIGKILL')
    await sleep(200)
    try { run('link', 'del', hostIf) } catch {}
    try { run('netns', 'del', ns) } catch {}
  })

  it('a curl from the guest arrives through the SOCKS server, which is asked for the destination', { timeout: T }, async () => {
    const n = targets().length
    // --resolve: the stage's --dns-upstream belongs to microvm-secrets, so
    // the guest dials A's address (the relay asks for the address).
    const r = await curl(`--resolve proxied.test:8081:${ipA} http://proxied.test:8081/`)
    assert.ok(r.ok, r.stderr)
    assert.equal(r.body, `peer ${ipB}`, 'the server did not see the proxy as its peer')
    assert.equal(targets().length, n + 1, `SOCKS CONNECTs: ${JSON.stringify(targets().slice(n))}`)
    assert.match(targets().at(-1), new RegExp(`^(proxied\\.test|${ipA.replaceAll('.', '\\.')}):8081$`))
  })

  it('GET shows the egressProxy without its password', { timeout: T }, async () => {
    const res = await fetch(`${process.env.E2B_API_URL}/sandboxes/${sbx.sandboxId}`, { headers: { 'X-API-Key': process.env.E2B_API_KEY } })
    const info = await res.json()
    assert.deepEqual(info.network?.egressProxy, { address: `${ipB}:1080`, username: user })
    assert.equal(JSON.stringify(info).includes(pass), false, 'GET shows the proxy password')
  })

  it('UDP does not leave while the egressProxy is set', { timeout: T }, async () => {
    assert.equal(await udpLeaves(`via-${id}`), false, 'a UDP datagram left the node directly')
  })

  it('a wrong password: the connection fails, nothing goes direct', { timeout: T }, async () => {
    await sbx.updateNetwork({ egressProxy: { address: `${ipB}:1080`, username: user, password: 'wrong' } })
    const r = await curl(`http://${ipA}:8081/`, 15)
    assert.equal(r.ok, false, `a wrong proxy password still connected: ${r.body}`)
  })

  it('updateNetwork({}) goes direct again, UDP included', { timeout: T }, async () => {
    await sbx.updateNetwork({})
    const direct = await curl(`http://${ipA}:8081/`, 15)
    assert.equal(direct.body, `peer ${hostIP}`, `after updateNetwork({}): ${direct.stderr}`)
    assert.equal(await udpLeaves(`direct-${id}`), true, 'UDP did not leave without an egressProxy (the UDP check above proves nothing)')
  })
})
