// Isolation checks: what a sandbox can see and reach. Needs root on the host
// (it creates a network namespace to stand in for "the internet").
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createServer, connect } from 'node:net'
import { execFileSync, spawn } from 'node:child_process'
import { release } from 'node:os'
import { tracker, uniq, sh, daemonPort, sleep, waitUntil, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('isolation')
after(() => t.killAll())

/** Network facts from inside a sandbox: {gateway, ip}. */
async function netInfo (sbx) {
  const r = await sh(sbx, [
    'cat /proc/net/route 2>/dev/null', 'echo ---',
    'ip -4 route 2>/dev/null', 'echo ---',
    'ip -4 -o addr 2>/dev/null', 'echo ---',
    'hostname -I 2>/dev/null', 'echo ---',
    "python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('10.77.0.1', 9)); print(s.getsockname()[0])\" 2>/dev/null",
    'true'
  ].join('; '))
  const [procRoute = '', ipRoute = '', ipAddr = '', hostnameI = '', pyIP = ''] = r.stdout.split('---\n')
  let gateway
  const def = ipRoute.match(/^default via (\d+\.\d+\.\d+\.\d+)/m)
  if (def) gateway = def[1]
  if (!gateway) {
    for (const line of procRoute.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/)
      if (f[1] === '00000000' && f[2] && f[2] !== '00000000') {
        const n = parseInt(f[2], 16)
        gateway = [n & 255, (n >> 8) & 255, (n >> 16) & 255, (n >>> 24) & 255].join('.')
      }
    }
  }
  const isIP = (s) => /^\d+\.\d+\.\d+\.\d+$/.test(s) && !s.startsWith('127.')
  let ip = (ipAddr.match(/inet (\d+\.\d+\.\d+\.\d+)\//g) ?? []).map((s) => s.slice(5, -1)).find(isIP)
  ip ??= hostnameI.trim().split(/\s+/).find(isIP)
  ip ??= isIP(pyIP.trim()) ? pyIP.trim() : undefined
  assert.ok(gateway, `no default gateway found inside the sandbox: ${r.stdout}`)
  assert.ok(ip, `no IPv4 address found inside the sandbox: ${r.stdout}`)
  return { gateway, ip }
}

/** curl from inside; returns {ok, code, body, ms}. */
async function curl (sbx, url, seconds = 3) {
  const start = Date.now()
  const r = await sh(sbx, `curl -sS -w '\\n%{http_code}' -m ${seconds} ${url}`, { timeoutMs: (seconds + 20) * 1000 })
  const ms = Date.now() - start
  const lines = r.stdout.trimEnd().split('\n')
  const code = Number(lines.pop())
  return { ok: r.exitCode === 0 && code > 0, exitCode: r.exitCode, code, body: lines.join('\n'), stderr: r.stderr, ms }
}

describe('isolation', { timeout: TEST_TIMEOUT * 5 }, () => {
  let sbx
  before(async () => { sbx = await t.create() }, { timeout: TEST_TIMEOUT })

  it('runs under gVisor, not the host kernel', { timeout: TEST_TIMEOUT }, async () => {
    const u = await sbx.commands.run('uname -r')
    assert.notEqual(u.stdout.trim(), release(), 'sandbox reports the host kernel release')
    const d = await sh(sbx, 'dmesg 2>&1 | head -20', { user: 'root' })
    assert.match(d.stdout, /gVisor/i, `dmesg does not mention gVisor: ${d.stdout}`)
  })

  it('sees no host processes or host files', { timeout: TEST_TIMEOUT }, async () => {
    const r = await sbx.commands.run('for p in /proc/[0-9]*; do cat $p/comm 2>/dev/null; done', { user: 'root' })
    const names = r.stdout.trim().split('\n')
    assert.ok(names.length > 0 && names.length < 40, `unexpected process count ${names.length}: ${names}`)
    for (const host of ['node', 'airlock', 'runsc', 'runsc-gofer', 'runsc-sandbox', 'systemd', 'sshd', 'containerd', 'go']) {
      assert.ok(!names.includes(host), `host process ${host} visible inside the sandbox: ${names}`)
    }
    assert.ok(!names.includes(String(process.pid)))
    const dataDir = process.env.AIRLOCK_E2E_DATA_DIR ?? '/var/lib/airlock-test'
    const f = await sh(sbx, `test -e ${dataDir}/airlock.db && echo VISIBLE || echo hidden`, { user: 'root' })
    assert.equal(f.stdout, 'hidden\n', 'the daemon data dir is visible inside the sandbox')
  })

  it('cannot reach the daemon or other host services', { timeout: TEST_TIMEOUT }, async () => {
    const { gateway } = await netInfo(sbx)
    const port = daemonPort()
    // A host service listening on all addresses, including the sandbox gateway.
    const server = createServer((c) => { c.on('error', () => {}); c.end('HOST-SERVICE\n') })
    await new Promise((resolve) => server.listen(0, '0.0.0.0', resolve))
    const hostPort = server.address().port
    try {
      // Positive control: the host itself reaches that service on the gateway address.
      const direct = await new Promise((resolve) => {
        const s = connect(hostPort, gateway, () => { s.destroy(); resolve(true) })
        s.on('error', () => resolve(false))
      })
      assert.ok(direct, `host cannot reach its own service on ${gateway}:${hostPort}`)

      for (const url of [
        `http://${gateway}:${port}/health`,
        `http://127.0.0.1:${port}/health`,
        `http://${gateway}:${hostPort}/`,
        `http://localhost:${hostPort}/`
      ]) {
        const r = await curl(sbx, url)
        assert.equal(r.ok, false, `sandbox reached ${url}: ${r.code} ${r.body}`)
        assert.ok(!r.body.includes('HOST-SERVICE'))
      }
    } finally {
      server.close()
    }
  })

  it('a sandbox cannot reach another sandbox', { timeout: TEST_TIMEOUT }, async () => {
    const other = await t.create()
    const a = await netInfo(sbx)
    const b = await netInfo(other)
    assert.notEqual(a.ip, b.ip)
    // Positive control: the agent answers on its own address inside the sandbox.
    const self = await curl(sbx, `http://${a.ip}:49983/health`)
    assert.ok(self.ok && self.code >= 200 && self.code < 300, `agent not reachable from its own sandbox: ${JSON.stringify(self)}`)
    const cross = await curl(other, `http://${a.ip}:49983/health`)
    assert.equal(cross.ok, false, `sandbox ${other.sandboxId} reached ${sbx.sandboxId}'s agent: ${JSON.stringify(cross)}`)
    const gw = await curl(other, `http://${a.gateway}:49983/health`)
    assert.equal(gw.ok, false, 'reached the other sandbox gateway')
  })

  describe('egress', () => {
    // A network namespace we own stands in for the outside world.
    const id = uniq().slice(0, 6)
    const ns = `e2e-ext-${id}`
    const hostIf = `e2ex${id}`
    const nsIf = `e2ey${id}`
    // The stand-in's /30 (override to run two suites on one host at once).
    const extBase = process.env.AIRLOCK_E2E_EXT_NET ?? '10.78.255'
    const hostIP = `${extBase}.1`
    const extIP = `${extBase}.2`
    let server
    const run = (...args) => execFileSync('ip', args, { stdio: 'pipe' })

    before(async () => {
      run('netns', 'add', ns)
      run('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf)
      run('link', 'set', nsIf, 'netns', ns)
      run('addr', 'add', `${hostIP}/30`, 'dev', hostIf)
      run('link', 'set', hostIf, 'up')
      run('-n', ns, 'addr', 'add', `${extIP}/30`, 'dev', nsIf)
      run('-n', ns, 'link', 'set', nsIf, 'up')
      run('-n', ns, 'link', 'set', 'lo', 'up')
      run('-n', ns, 'route', 'add', 'default', 'via', hostIP)
      server = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e',
        `require('http').createServer((q, s) => s.end('outside-ok')).listen(8080, '${extIP}')`], { stdio: 'ignore' })
      const up = await waitUntil(async () => {
        try { return (await (await fetch(`http://${extIP}:8080/`)).text()) === 'outside-ok' } catch { return false }
      }, 10_000)
      assert.ok(up, 'test server in the external namespace did not start')
    }, { timeout: 30_000 })

    after(async () => {
      server?.kill('SIGKILL')
      await sleep(200)
      try { run('link', 'del', hostIf) } catch {}
      try { run('netns', 'del', ns) } catch {}
    })

    it('allowed by default', { timeout: TEST_TIMEOUT }, async () => {
      const r = await curl(sbx, `http://${extIP}:8080/`, 5)
      assert.ok(r.ok && r.body === 'outside-ok', `default sandbox cannot reach the outside: ${JSON.stringify(r)}`)
    })

    it('allowInternetAccess:false is denied, quickly and cleanly', { timeout: TEST_TIMEOUT }, async () => {
      const closed = await t.create({ allowInternetAccess: false })
      const r = await curl(closed, `http://${extIP}:8080/`, 5)
      assert.equal(r.ok, false, `sandbox without internet reached the outside: ${JSON.stringify(r)}`)
      assert.ok(r.ms < 15_000, `denied request took ${r.ms} ms`)
      // The agent still works.
      const e = await closed.commands.run('echo fine')
      assert.equal(e.stdout, 'fine\n')
      const info = await closed.getInfo()
      assert.equal(info.state, 'running')
    })
  })
})

