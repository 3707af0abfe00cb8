// Issue 29 on the microVM runtime (scripts/test-microvm.sh): E2B's
// network.rules with a ${e2b.secrets.<name>} header, enforced by the node's
// egress proxy in front of a QEMU guest. The guest's frames reach the host
// through the TAP → eth0 tc redirect and the sandbox's veth, where the same
// nftables steering as gVisor's DNATs them to the proxy
// (internal/network/doc.go, "Steering to the egress proxy"). A network
// namespace we own stands in for the internet: HTTPS servers for
// secrets-a.test and secrets-b.test (a leaf of the throwaway upstream CA
// that test-microvm.sh makes and the daemon trusts with
// --egress-proxy-upstream-ca) and a DNS server at <ext>.28, the daemon's
// --dns-upstream. The stage's daemon opens <ext>.24/29 with
// --deny-out-except. The sandbox is a code-interpreter-v1 create with
// rules while that template's warm pool holds a VM: it must not be served
// from the pool (the daemon log says which path served it).
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { readFileSync } from 'node:fs'
import { Sandbox } from 'e2b'
import { uniq, sh, sleep, waitUntil } from './helpers.mjs'
import { dnsServer, resolveA } from './standin.mjs'

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

/** Raw REST (this SDK version sends no network.rules, and has no /secrets). */
async function api (method, path, body) {
  const res = await fetch(`${process.env.E2B_API_URL}${path}`, {
    method, headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' }, body: body && JSON.stringify(body)
  })
  return { status: res.status, body: await res.text() }
}

describe('microVM: network.rules secrets through the egress proxy', { timeout: T * 6 }, () => {
  const id = uniq().slice(0, 6)
  const ns = `e2e-vmsx-${id}`
  const hostIf = `e2vs${id}`
  const nsIf = `e2vt${id}`
  const ext = process.env.AIRLOCK_E2E_EXT_NET ?? '10.78.255'
  const hostIP = `${ext}.25`
  const ipA = `${ext}.26`
  const ipB = `${ext}.27`
  const ipDNS = `${ext}.28`
  const caDir = process.env.AIRLOCK_E2E_UPSTREAM_CA_DIR
  const secretName = `vm-${id}-${uniq()}`
  const value = `vm-secret-${uniq()}-VALUE`
  const seen = [] // every request the stand-in servers got: {server, host, authorization}
  const run = (...args) => execFileSync('ip', args, { stdio: 'pipe' })
  let server
  let sbx

  before(async () => {
    assert.ok(caDir, 'AIRLOCK_E2E_UPSTREAM_CA_DIR is not set (scripts/test-microvm.sh makes the upstream CA)')
    // The stage's daemon keeps a warm pool of one code-interpreter-v1 VM,
    // whose network was set up without rules. The sandbox under test is a
    // create with rules of that template once the pool holds a VM: it must
    // not take it (it restores the boot snapshot instead), or its rules
    // would be recorded and enforced by nothing. (A restore also asks far
    // less of an emulated, shared CPU than a cold boot.)
    assert.ok(await waitUntil(poolIdle, 240_000, 1_000), 'the warm pool of code-interpreter-v1 has no idle VM')
    run('netns', 'add', ns)
    run('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf)
    run('link', 'set', nsIf, 'netns', ns)
    run('addr', 'add', `${hostIP}/29`, 'dev', hostIf)
    run('link', 'set', hostIf, 'up')
    for (const a of [ipA, ipB, ipDNS]) run('-n', ns, 'addr', 'add', `${a}/29`, 'dev', nsIf)
    run('-n', ns, 'link', 'set', nsIf, 'up')
    run('-n', ns, 'link', 'set', 'lo', 'up')
    run('-n', ns, 'route', 'add', 'default', 'via', hostIP)
    // Two HTTPS servers (one leaf for both names), each logging what it got
    // as a JSON line on stdout, and the DNS server.
    server = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', `
      const fs = require('fs')
      const tls = { cert: fs.readFileSync('${caDir}/leaf.pem'), key: fs.readFileSync('${caDir}/leaf.key') }
      for (const [name, ip] of [['A', '${ipA}'], ['B', '${ipB}']]) {
        require('https').createServer(tls, (q, s) => {
          const got = { server: name, host: q.headers.host, authorization: q.headers.authorization ?? null }
          console.log(JSON.stringify(got))
          s.end(JSON.stringify(got))
        }).listen(443, ip)
      }
      ${dnsServer.toString()}
      dnsServer('${ipDNS}', { 'secrets-a.test': '${ipA}', 'secrets-b.test': '${ipB}' })`], { stdio: ['ignore', 'pipe', 'inherit'] })
    createInterface({ input: server.stdout }).on('line', (l) => { try { seen.push(JSON.parse(l)) } catch {} })
    const up = await waitUntil(async () => (await resolveA(ipDNS, 'secrets-a.test')) === ipA, 10_000)
    assert.ok(up, 'test servers in the external namespace did not start')

    const made = await api('POST', '/secrets', { name: secretName, value })
    assert.equal(made.status, 201, made.body)
    const r = await api('POST', '/sandboxes', {
      templateID: 'code-interpreter-v1', timeout: 600,
      network: { rules: { 'secrets-a.test': [{ transform: { headers: { Authorization: `Bearer \${e2b.secrets.${secretName}}` } } }] } }
    })
    assert.equal(r.status, 201, r.body)
    assert.ok(!r.body.includes(value), 'the create response holds the secret')
    sbx = await Sandbox.connect(JSON.parse(r.body).sandboxID)
    const line = log().find((l) => l.includes(`sandbox=${sbx.sandboxId}`) && /msg="sandbox created/.test(l)) ?? ''
    assert.match(line, /sandbox created/, 'no "sandbox created" line in the daemon log')
    assert.doesNotMatch(line, /from the warm pool/, 'a create with rules took the pooled VM (set up without the steering)')
  }, { timeout: T * 2 })

  after(async () => {
    if (sbx) await Sandbox.kill(sbx.sandboxId).catch(() => {})
    await api('DELETE', `/secrets/${secretName}`).catch(() => {})
    server?.kill('SIGKILL')
    await sleep(200)
    try { run('link', 'del', hostIf) } catch {}
    try { run('netns', 'del', ns) } catch {}
  })

  const curl = (args, box = sbx) => sh(box, `curl -sS -m 30 -w '\\n%{http_code}' ${args}`, { timeoutMs: 120_000 })
  const leaks = () => seen.filter((q) => (q.authorization ?? '').includes(value))

  const injected = async (when, box = sbx) => {
    const n = seen.length
    const r = await curl('https://secrets-a.test/headers', box)
    assert.equal(r.exitCode, 0, `${when}: curl failed: ${r.stderr}`)
    const [body, code] = r.stdout.trim().split('\n')
    assert.equal(code, '200', `${when}: ${r.stdout}`)
    assert.deepEqual(JSON.parse(body), { server: 'A', host: 'secrets-a.test', authorization: `Bearer ${value}` }, when)
    assert.deepEqual(seen.slice(n), [{ server: 'A', host: 'secrets-a.test', authorization: `Bearer ${value}` }], `${when}: what server A saw`)
  }

  it('the ruled host gets the secret header, added outside the guest (its CA trusted by curl)', { timeout: T }, async () => {
    await injected('first request')
  })

  // One cat and one tr: a process per file is slow in an emulated guest.
  it("the guest never holds the value: not in env, /proc's environ and cmdline, or files", { timeout: T * 2 }, async () => {
    const env = await sh(sbx, "env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'; true", { user: 'root', timeoutMs: 240_000 })
    assert.ok(env.stdout.includes('PATH='), `empty dump: ${JSON.stringify(env)}`)
    assert.ok(!env.stdout.includes(value), 'the guest environment holds the secret')
    const half = value.length >> 1
    const grep = await sh(sbx, `p1='${value.slice(0, half)}'; p2='${value.slice(half)}'; grep -rlaF -- "$p1$p2" /home /tmp /etc /root /usr/local/share /run 2>/dev/null; true`, { user: 'root', timeoutMs: 240_000 })
    assert.equal(grep.stdout.trim(), '', `files in the guest hold the secret: ${grep.stdout}`)
  })

  it('a host without a rule gets nothing; Host other than SNI is refused with 421', { timeout: T }, async () => {
    const before = seen.length
    const b = await curl('-k https://secrets-b.test/headers')
    assert.equal(b.exitCode, 0, b.stderr)
    assert.deepEqual(JSON.parse(b.stdout.trim().split('\n')[0]), { server: 'B', host: 'secrets-b.test', authorization: null })
    const mixed = await curl("-H 'Host: secrets-b.test' https://secrets-a.test/headers")
    assert.equal(mixed.stdout.trim().split('\n').at(-1), '421', `Host≠SNI: ${JSON.stringify(mixed)}`)
    assert.deepEqual(seen.slice(before).map((q) => q.server), ['B'], 'upstream requests after the bypass attempts')
    assert.equal(leaks().length, 1, `the secret reached the servers more than the one ruled request: ${JSON.stringify(leaks())}`)
  })

  it('after pause and resume the CA and the steering are back: the header is injected again', { timeout: T }, async () => {
    assert.equal(await sbx.pause(), true)
    sbx = await Sandbox.connect(sbx.sandboxId)
    await injected('after pause and resume')
  })

  // A snapshot is like a template (E2B): the rules come with the create,
  // not with the snapshot.
  it('a fork child, and a sandbox from a named snapshot created with rules, get the CA, the rules and the steering', { timeout: T }, async () => {
    const made = []
    try {
      const [kid] = await Sandbox.fork(sbx.sandboxId, { count: 1 })
      assert.ok(!(kid instanceof Error), `fork failed: ${kid}`)
      made.push(kid.sandboxId)
      await injected('fork child', kid)
      const name = `vmsx-${uniq()}`
      const snap = await sbx.createSnapshot({ name })
      const plain = await Sandbox.create(name, { timeoutMs: 300_000 })
      made.push(plain.sandboxId)
      const n = seen.length
      const r = await curl(`-k --resolve secrets-a.test:443:${ipA} https://secrets-a.test/headers`, plain)
      assert.equal(r.exitCode, 0, r.stderr)
      assert.deepEqual(seen.slice(n), [{ server: 'A', host: 'secrets-a.test', authorization: null }], 'a sandbox from the snapshot created without rules')
      const res = await api('POST', '/sandboxes', {
        templateID: name, timeout: 300,
        network: { rules: { 'secrets-a.test': [{ transform: { headers: { Authorization: `Bearer \${e2b.secrets.${secretName}}` } } }] } }
      })
      assert.equal(res.status, 201, res.body)
      const ruled = await Sandbox.connect(JSON.parse(res.body).sandboxID)
      made.push(ruled.sandboxId)
      await injected('sandbox from a snapshot, created with rules', ruled)
      assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    } finally {
      await Promise.allSettled(made.map((id) => Sandbox.kill(id)))
    }
    assert.equal(leaks().length, 4, 'the secret went only to the four ruled requests')
  })

})
