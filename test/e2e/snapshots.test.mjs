// Pause/resume with memory through the official SDKs: processes, files and
// interpreter variables survive a pause; pause twice is a 409 (false);
// lifecycle onTimeout "pause"; a paused sandbox without autoResume is not
// reachable through the proxy, one with autoResume wakes up on traffic.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'
import { tracker, sh, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('snapshots')
after(() => t.killAll())

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

describe('pause and resume', () => {
  it('keeps files and running processes across pause/connect', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create()
    await sbx.files.write('/home/user/before.txt', 'written before pause')
    // A background counter: still counting after the resume means the
    // process itself survived (not restarted).
    await sbx.commands.run('i=0; while true; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.1; done',
      { background: true })
    await sleep(500)
    const before = Number((await sbx.files.read('/tmp/counter')).trim())
    assert.ok(before > 0, `counter should run before the pause, got ${before}`)

    assert.equal(await sbx.betaPause(), true, 'first pause succeeds')
    assert.equal(await Sandbox.betaPause(sbx.sandboxId), false, 'second pause reports "already paused"')
    const info = await Sandbox.getInfo(sbx.sandboxId)
    assert.equal(info.state, 'paused')
    const paused = await Sandbox.list({ query: { metadata: t.metadata, state: ['paused'] } }).nextItems()
    assert.ok(paused.some((s) => s.sandboxId === sbx.sandboxId), 'listed as paused')

    const resumed = await Sandbox.connect(sbx.sandboxId)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running')
    assert.equal(await resumed.files.read('/home/user/before.txt'), 'written before pause')
    const atResume = Number((await resumed.files.read('/tmp/counter')).trim())
    assert.ok(atResume >= before, `counter kept its value (${before} → ${atResume})`)
    await sleep(600)
    const later = Number((await resumed.files.read('/tmp/counter')).trim())
    assert.ok(later > atResume, `background process still running after resume (${atResume} → ${later})`)
    // Commands and the network work after the resume.
    const r = await sh(resumed, 'echo ok && ip -4 addr show eth0 | grep -c inet')
    assert.equal(r.exitCode, 0, r.stderr)
    assert.match(r.stdout, /^ok\n1\n$/)
    // A second pause/resume cycle works too.
    assert.equal(await resumed.betaPause(), true)
    const again = await Sandbox.connect(sbx.sandboxId)
    assert.equal(await again.files.read('/home/user/before.txt'), 'written before pause')
    assert.equal(await again.kill(), true)
    assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'killed paused-then-resumed sandbox is gone')
  })

  it('kill removes a paused sandbox', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create()
    assert.equal(await sbx.betaPause(), true)
    assert.equal(await Sandbox.kill(sbx.sandboxId), true)
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId), /doesn't exist|not found/i)
  })

  it('pausing an unknown sandbox is a not-found error', { timeout: TEST_TIMEOUT }, async () => {
    await assert.rejects(Sandbox.betaPause('i0000000000000000nope'), (err) => /not found|doesn't exist/i.test(String(err)))
  })

  it('a paused sandbox without autoResume is not reachable through the proxy', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create()
    assert.equal(await sbx.betaPause(), true)
    await assert.rejects(sbx.commands.run('true', { requestTimeoutMs: 10_000 }))
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused', 'traffic did not resume it')
    await Sandbox.kill(sbx.sandboxId)
  })

  it('onTimeout pause: the timeout pauses instead of killing; autoResume wakes it on traffic', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create({ timeoutMs: 3_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
    await sbx.files.write('/home/user/keep.txt', 'kept')
    const info = await Sandbox.getInfo(sbx.sandboxId)
    assert.equal(info.lifecycle?.onTimeout, 'pause')
    assert.equal(info.lifecycle?.autoResume, true)
    await sleep(5_000)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused', 'paused at 5 s')
    // Traffic through the proxy resumes it.
    assert.equal(await sbx.files.read('/home/user/keep.txt'), 'kept')
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running')
    await Sandbox.kill(sbx.sandboxId)
  })
})

describe('pause and resume with the code interpreter', () => {
  it('Python variables survive a pause', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await CodeSandbox.create({ timeoutMs: 300_000, metadata: t.metadata })
    try {
      const set = await sbx.runCode('x = 41\nx')
      assert.equal(set.error, undefined)
      assert.equal(set.text, '41')
      assert.equal(await sbx.betaPause(), true)
      assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
      const resumed = await CodeSandbox.connect(sbx.sandboxId)
      const r = await resumed.runCode('x + 1')
      assert.equal(r.error, undefined, r.error?.value)
      assert.equal(r.text, '42')
    } finally {
      await Sandbox.kill(sbx.sandboxId)
    }
  })
})
