// Filesystem-only pause (E2B's keepMemory: false) on the default runtime:
// the disk stays, processes go, connect boots the sandbox fresh (a new
// boot_id) with its env vars and token; the lifecycle onTimeout pause with
// keepMemory: false does the same on its own. The microVM variant is in
// microvm.test.mjs.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { tracker, waitUntil, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('fspause')
after(() => t.killAll())

const bootId = async (s) => (await s.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout.trim()

describe('filesystem-only pause', () => {
  it('pause({keepMemory: false}): files stay, processes go, connect boots it fresh', { timeout: TEST_TIMEOUT }, async () => {
    const s = await t.create({ envs: { KEEP_ENV: 'kept-env' } })
    const boot1 = await bootId(s)
    assert.match(boot1, /^[0-9a-f-]{36}$/)
    await s.commands.run('sleep 1000', { background: true })
    await s.files.write('/home/user/fs.txt', 'on disk')
    assert.equal(await s.pause({ keepMemory: false }), true)
    assert.equal((await Sandbox.getInfo(s.sandboxId)).state, 'paused')
    assert.equal(await s.pause({ keepMemory: false }), false, 'a second pause is "already paused"')
    const r = await Sandbox.connect(s.sandboxId)
    assert.equal((await Sandbox.getInfo(s.sandboxId)).state, 'running')
    const out = await r.commands.run('cat /home/user/fs.txt; echo; pgrep -c sleep || true; echo $KEEP_ENV; id -un')
    assert.equal(out.stdout, 'on disk\n0\nkept-env\nuser\n')
    assert.notEqual(await bootId(r), boot1, 'boot_id unchanged: the sandbox was not booted again')
    // Files through the agent, and a pause with memory afterwards.
    assert.equal(await r.files.read('/home/user/fs.txt'), 'on disk')
    await r.commands.run('sleep 1000', { background: true })
    assert.equal(await r.pause(), true)
    const again = await Sandbox.connect(s.sandboxId)
    assert.equal((await again.commands.run('pgrep -c sleep')).stdout.trim(), '1')
  })

  it('lifecycle onTimeout {action: pause, keepMemory: false} keeps only the disk', { timeout: TEST_TIMEOUT }, async () => {
    const s = await t.create({ timeoutMs: 5_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
    await s.files.write('/home/user/t.txt', 'timeout')
    await s.commands.run('sleep 1000', { background: true })
    assert.ok(await waitUntil(async () => (await Sandbox.getInfo(s.sandboxId)).state === 'paused', 60_000, 500), 'not paused after its timeout')
    const r = await Sandbox.connect(s.sandboxId)
    const out = await r.commands.run('cat /home/user/t.txt; echo; pgrep -c sleep || true')
    assert.equal(out.stdout, 'timeout\n0\n')
  })

  it('raw API: pause {"memory": false} answers 204, then 409', { timeout: TEST_TIMEOUT }, async () => {
    const s = await t.create()
    const url = new URL(`/sandboxes/${s.sandboxId}/pause`, process.env.E2B_API_URL)
    const post = () => fetch(url, { method: 'POST', headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' }, body: '{"memory":false}' })
    assert.equal((await post()).status, 204)
    const second = await post()
    assert.equal(second.status, 409)
    assert.equal((await second.json()).code, 409)
  })
})
