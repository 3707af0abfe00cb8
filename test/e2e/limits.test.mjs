// Resource limits: a memory bomb (only the process dies), a fork bomb, a disk
// filler and a busy loop are contained in their sandbox; the daemon and a neighbour sandbox stay
// healthy. Limits are Airlock's extension keys of the create body, so the
// sandboxes are created over raw HTTP and then driven with the SDK.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError, NotEnoughSpaceError } from 'e2b'
import { tracker, sh, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('limits')
const extra = []
after(async () => {
  await t.killAll()
  await Promise.allSettled(extra.map((id) => Sandbox.kill(id)))
})

const api = process.env.E2B_API_URL
const headers = { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' }

/** Creates a sandbox with limits over raw HTTP and connects the SDK to it. */
async function createWithLimits (limits) {
  const res = await fetch(`${api}/v2/sandboxes`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ templateID: 'base', timeout: 300, metadata: t.metadata, ...limits })
  })
  const body = await res.json()
  assert.equal(res.status, 201, JSON.stringify(body))
  extra.push(body.sandboxID)
  return Sandbox.connect(body.sandboxID)
}

/** Median wall time of three `echo` commands. */
async function echoLatency (sbx) {
  const times = []
  for (let i = 0; i < 3; i++) {
    const start = performance.now()
    const r = await sbx.commands.run('echo ok')
    assert.equal(r.stdout, 'ok\n')
    times.push(performance.now() - start)
  }
  return times.sort((a, b) => a - b)[1]
}

/** The neighbour still answers and the daemon is healthy. */
async function assertUnharmed (neighbour, idleMs, what) {
  const ms = await echoLatency(neighbour)
  console.log(`# neighbour echo after ${what}: ${ms.toFixed(0)} ms (idle ${idleMs.toFixed(0)} ms)`)
  assert.ok(ms < 10_000, `neighbour took ${ms} ms after ${what}`)
  const health = await fetch(`${api}/health`)
  assert.equal(health.status, 200, `daemon unhealthy after ${what}`)
}

describe('resource limits', { timeout: TEST_TIMEOUT * 4 }, () => {
  let neighbour
  let idleMs
  before(async () => {
    neighbour = await t.create()
    idleMs = await echoLatency(neighbour)
  })

  it('limits from the create body show in info and inside the sandbox; bad values are 400', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await createWithLimits({ cpuCount: 1, memoryMB: 300, diskSizeMB: 200, maxProcesses: 100, maxOpenFiles: 2048 })
    const info = await sbx.getInfo()
    assert.equal(info.cpuCount, 1)
    assert.equal(info.memoryMB, 300)
    const raw = await (await fetch(`${api}/sandboxes/${sbx.sandboxId}`, { headers })).json()
    assert.equal(raw.diskSizeMB, 200) // the SDK does not surface diskSizeMB
    const r = await sbx.commands.run('ulimit -u; ulimit -n; df -m / | tail -1')
    const [nproc, nofile, df] = r.stdout.trim().split('\n')
    assert.equal(nproc, '100')
    assert.equal(nofile, '2048')
    const sizeMB = Number(df.trim().split(/\s+/)[1])
    assert.ok(sizeMB > 100 && sizeMB <= 200, `root filesystem ${sizeMB} MiB, want ≤ 200`)
    const free = await sbx.commands.run('free -m | awk \'/Mem:/ {print $2}\'')
    // gVisor sizes the guest from the host cgroup limit, which adds 64 MiB for the sentry and gofer.
    assert.ok(Number(free.stdout) >= 280 && Number(free.stdout) <= 300 + 64, `guest sees ${free.stdout.trim()} MiB of memory, want ~300`)

    for (const [body, msg] of [
      [{ memoryMB: 1 }, 'memoryMB must be between'],
      [{ cpuCount: 1000 }, 'cpuCount must be between'],
      [{ maxProcesses: 100000 }, 'maxProcesses must be between']
    ]) {
      const res = await fetch(`${api}/v2/sandboxes`, { method: 'POST', headers, body: JSON.stringify(body) })
      const err = await res.json()
      assert.equal(res.status, 400)
      assert.equal(err.code, 400)
      assert.match(err.message, new RegExp(msg))
    }
  })

  it('fork bomb: forks fail with EAGAIN inside, the sandbox survives and can be cleaned up', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await createWithLimits({ maxProcesses: 64 })
    const bomb = await sh(sbx, 'timeout 20 bash -c \'f(){ f | f & }; f; sleep 8\'; echo rc=$?', { timeoutMs: 60_000 })
    assert.match(bomb.stderr + bomb.stdout, /fork: (retry: )?Resource temporarily unavailable/)
    // The bomb's processes belong to `user`; root (a different uid) can still run and clean up.
    const clean = await sh(sbx, 'pkill -9 -u user; sleep 1; ps -u user --no-headers | wc -l', { user: 'root', timeoutMs: 60_000 })
    assert.equal(clean.exitCode, 0, clean.stderr)
    const after = await sbx.commands.run('echo alive')
    assert.equal(after.stdout, 'alive\n')
    assert.equal((await sbx.getInfo()).state, 'running')
    await assertUnharmed(neighbour, idleMs, 'a fork bomb')
  })

  it('disk filler: ENOSPC inside, 507 from /files, other sandboxes unaffected', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await createWithLimits({ diskSizeMB: 128 })
    const fill = await sh(sbx, 'dd if=/dev/zero of=/home/user/fill bs=1M count=1024', { timeoutMs: 120_000 })
    assert.notEqual(fill.exitCode, 0)
    assert.match(fill.stderr, /No space left on device/)
    await assert.rejects(sbx.files.write('/home/user/more.bin', 'x'.repeat(4 << 20)), NotEnoughSpaceError)
    // Freeing space makes the sandbox usable again.
    await sbx.commands.run('rm -f /home/user/fill')
    await sbx.files.write('/home/user/small.txt', 'fine')
    assert.equal(await sbx.files.read('/home/user/small.txt'), 'fine')
    // The neighbour's disk is its own.
    await neighbour.files.write('/home/user/n.txt', 'x'.repeat(1 << 20))
    await assertUnharmed(neighbour, idleMs, 'a disk filler')
  })

  it('busy loop and memory bomb: the process over the memory limit dies, its sandbox, files and other processes live', { timeout: TEST_TIMEOUT }, async () => {
    const busy = await createWithLimits({ cpuCount: 1 })
    await busy.commands.run('timeout 120 sh -c "while :; do :; done"', { background: true })
    const sbx = await createWithLimits({ memoryMB: 256 })
    await sbx.commands.run('sleep 1000', { background: true })
    await sbx.files.write('/home/user/keep.txt', 'kept')
    // E2B's behaviour (the guest kernel's OOM killer): the command ends by
    // SIGKILL; gVisor has no OOM killer, so the agent's guard does it.
    const bomb = 'python3 -c "b=[]\nwhile True: b.append(bytearray(100*2**20))"'
    await assert.rejects(sbx.commands.run(bomb, { timeoutMs: 120_000 }),
      (err) => err instanceof CommandExitError && /signal: killed/.test(String(err.error)), 'the memory bomb did not end by SIGKILL')
    assert.equal((await sbx.getInfo()).state, 'running')
    const r = await sbx.commands.run('cat /home/user/keep.txt; echo; pgrep -c sleep')
    assert.equal(r.stdout, 'kept\n1\n')
    // Several processes that together exceed the limit: the largest goes
    // each time, the sandbox stays.
    const hogs = await sh(sbx, 'for i in 1 2 3 4; do python3 -c "import time; b = bytearray(90*2**20); time.sleep(30)" & done; wait; echo done', { timeoutMs: 120_000 })
    assert.match(hogs.stdout, /done/)
    assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n')
    await assertUnharmed(neighbour, idleMs, 'a memory bomb next to a busy loop')
    assert.equal((await busy.getInfo()).state, 'running', 'the busy sandbox was harmed')
  })
})
