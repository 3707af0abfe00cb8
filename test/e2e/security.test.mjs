// Escape and abuse attempts through the official E2B SDK (issue 7). Each test
// asserts that the attack failed and that a second sandbox and the daemon are
// unharmed. The raw-HTTP counterpart with more cases is test/gohttp/security_test.go.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { tracker, uniq, sh, waitUntil, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('security')
after(() => t.killAll())

async function daemonHealthy () {
  const r = await fetch(new URL('/health', process.env.E2B_API_URL))
  return r.ok
}

/** Runs a positive-path command (no retries: a cut stream is a failure). */
async function steady (sbx, cmd, opts) {
  return await sbx.commands.run(cmd, opts)
}

describe('security', { timeout: TEST_TIMEOUT * 6 }, () => {
  let attacker, witness
  const marker = `witness-${uniq()}`
  before(async () => {
    [attacker, witness] = await Promise.all([t.create(), t.create()])
    await witness.files.write('/home/user/marker', marker)
  }, { timeout: TEST_TIMEOUT })

  async function assertUnharmed () {
    assert.ok(await daemonHealthy(), 'daemon /health not ok')
    assert.equal(await witness.files.read('/home/user/marker'), marker, 'witness sandbox harmed')
  }

  it('a symlink to /etc/shadow cannot be downloaded as user', { timeout: TEST_TIMEOUT }, async () => {
    const shadow = await steady(attacker, 'cat /etc/shadow', { user: 'root' })
    assert.match(shadow.stdout, /^root:/m, 'positive control: root reads /etc/shadow')
    await steady(attacker, 'ln -sf /etc/shadow ~/shadow-link && ln -sfn / ~/root-link')
    for (const path of ['/home/user/shadow-link', '/home/user/root-link/etc/shadow', '../../etc/shadow']) {
      let content
      try { content = await attacker.files.read(path, { user: 'user' }) } catch { content = undefined }
      assert.ok(content === undefined || !content.includes('root:'), `${path} leaked /etc/shadow`)
    }
    // Writing through the link as user does not touch /etc/shadow.
    try { await attacker.files.write('/home/user/shadow-link', 'pwned', { user: 'user' }) } catch {}
    const after = await steady(attacker, 'cat /etc/shadow', { user: 'root' })
    assert.equal(after.stdout, shadow.stdout, '/etc/shadow changed by a user-level write through a symlink')
    await assertUnharmed()
  })

  it('another sandbox\'s access token does not open this sandbox', { timeout: TEST_TIMEOUT }, async () => {
    // The data plane as the SDK calls it, with the witness's token on the attacker.
    const res = await fetch(new URL(`/files?path=/home/user/marker&username=user`, process.env.E2B_SANDBOX_URL ?? process.env.E2B_API_URL), {
      headers: { 'E2b-Sandbox-Id': attacker.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': witness.envdAccessToken }
    })
    assert.equal(res.status, 401, `files with another sandbox's token: ${res.status}`)
    await assertUnharmed()
  })

  it('a forged or foreign signed URL is refused', { timeout: TEST_TIMEOUT }, async () => {
    await attacker.files.write('/home/user/secret.txt', 'secret')
    const good = await attacker.downloadUrl('/home/user/secret.txt', { useSignatureExpiration: 60_000 })
    const ok = await fetch(good)
    assert.equal(ok.status, 200, 'positive control: a real signed URL works')
    assert.equal(await ok.text(), 'secret')
    const u = new URL(good)
    u.searchParams.set('signature', 'v1_' + 'A'.repeat(43))
    assert.equal((await fetch(u)).status, 401, 'forged signature accepted')
    // A signature made by the witness for the same path.
    const foreign = new URL(await witness.downloadUrl('/home/user/secret.txt', { useSignatureExpiration: 60_000 }))
    const r = await fetch(foreign)
    assert.ok(r.status !== 200 || (await r.text()) !== 'secret', 'witness signature read the attacker file')
    await assertUnharmed()
  })

  it('a process ignoring SIGTERM is killed', { timeout: TEST_TIMEOUT }, async () => {
    const h = await attacker.commands.run(`trap '' TERM; while :; do sleep 0.2; done # ${uniq()}`, { background: true })
    assert.equal(await attacker.commands.kill(h.pid), true)
    const gone = await waitUntil(async () => !(await attacker.commands.list()).some((p) => p.pid === h.pid), 15_000)
    assert.ok(gone, 'process still listed after kill')
    await assertUnharmed()
  })

  it('fork bomb and memory bomb stay inside their sandbox', { timeout: TEST_TIMEOUT * 2 }, async () => {
    const victim = await t.create()
    await sh(victim, "timeout -s KILL 10 bash -c ':(){ :|:& };:' >/dev/null 2>&1; echo done", { timeoutMs: 60_000 })
    await assertUnharmed()
    try {
      await sh(victim, "python3 -c 'b=[]\nwhile True: b.append(bytearray(64<<20))'", { timeoutMs: 60_000 })
    } catch {}
    // Either a MemoryError inside, or the sandbox stopped and is reported so.
    await assertUnharmed()
  })

  it('the agent killed from inside: the sandbox is reported gone, not hung', { timeout: TEST_TIMEOUT }, async () => {
    const victim = await t.create()
    try { await victim.commands.run('kill -9 1', { user: 'root', timeoutMs: 20_000 }) } catch {}
    const gone = await waitUntil(async () => !(await victim.isRunning({ requestTimeoutMs: 5_000 }).catch(() => false)), 60_000, 500)
    assert.ok(gone, 'sandbox with a dead agent still reported running')
    const listed = await waitUntil(async () => {
      const p = Sandbox.list({ query: { metadata: t.metadata } })
      const items = await p.nextItems()
      return !items.some((s) => s.sandboxId === victim.sandboxId)
    }, 30_000, 500)
    assert.ok(listed, 'dead sandbox still listed')
    const start = Date.now()
    await assert.rejects(victim.commands.run('echo hi', { requestTimeoutMs: 20_000 }))
    assert.ok(Date.now() - start < 15_000, 'request to a dead sandbox hung')
    await assertUnharmed()
  })
})
