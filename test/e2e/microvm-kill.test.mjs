// Kill semantics on the microVM runtime (issue 24, issue 26 item 5), against
// the daemon of scripts/test-microvm.sh (run it with
// AIRLOCK_TEST_VM_NODE_FILES=microvm-kill.test.mjs): a kill answers once the
// VMM is SIGKILLed (its exit is waited for in the background), the rest of the teardown follows in the background, and a
// namespace held on purpose does not fail the kill.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { readdirSync, readFileSync, openSync, closeSync } from 'node:fs'
import { spawn, execFileSync } from 'node:child_process'
import { join } from 'node:path'
import { Sandbox } from 'e2b'
import { tracker, waitUntil } from './helpers.mjs'

const T = 300_000
const t = tracker('microvm-kill')
after(() => t.killAll())

/** The named network namespace of sandbox id (any daemon prefix). */
function netnsOf (id) {
  const name = readdirSync('/var/run/netns').find((n) => n.endsWith('-' + id))
  return name ? join('/var/run/netns', name) : undefined
}

/** Host processes whose command line names sandbox id (the VMM). */
function processesOf (id) {
  const pids = []
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p) || Number(p) === process.pid) continue
    try {
      if (readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(id)) pids.push(Number(p))
    } catch {}
  }
  return pids
}

/** Whether pid runs (a zombie does not). */
function running (pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return !/^\d+ \(.*\) [ZX] /.test(stat)
  } catch { return false }
}

/**
 * Whether pid runs and has no SIGKILL pending and is not exiting: a kill
 * answers once SIGKILL is sent, not once the VMM has exited (issue 24).
 */
function runningUnkilled (pid) {
  if (!running(pid)) return false
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8')
    for (const m of status.matchAll(/^(SigPnd|ShdPnd):\s*([0-9a-f]+)$/gm)) {
      if (BigInt('0x' + m[2]) & (1n << 8n)) return false
    }
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const flags = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[6])
    return (flags & 0x4) === 0 // PF_EXITING
  } catch { return false }
}

async function listed (id) {
  const list = await Sandbox.list({ query: { metadata: t.metadata } }).nextItems()
  return list.some((s) => s.sandboxId === id)
}

describe('microVM kill', { timeout: T * 3 }, () => {
  it('answers once the VMM is SIGKILLed; the rest follows', { timeout: T }, async () => {
    const sbx = await t.create()
    await sbx.commands.run('sleep 600', { background: true })
    const vmm = processesOf(sbx.sandboxId)
    assert.ok(vmm.length > 0, 'no host process names the sandbox')
    const t0 = Date.now()
    assert.equal(await Sandbox.kill(sbx.sandboxId), true)
    const took = Date.now() - t0
    const alive = vmm.filter(runningUnkilled)
    assert.deepEqual(alive, [], `VMM processes alive without SIGKILL when the kill answered (${took} ms)`)
    const exited = await waitUntil(() => vmm.filter(running).length === 0, 30_000, 50)
    assert.ok(exited, 'VMM processes still alive 30 s after the kill')
    assert.equal(await listed(sbx.sandboxId), false, 'killed sandbox still listed')
    const gone = await waitUntil(() => !netnsOf(sbx.sandboxId), 120_000, 500)
    assert.ok(gone, 'namespace of the killed sandbox still there after 2 min')
  })

  it('a held namespace does not fail the kill', { timeout: T }, async () => {
    const sbx = await t.create()
    const ns = netnsOf(sbx.sandboxId)
    assert.ok(ns, 'no namespace')
    const holder = spawn('nsenter', [`--net=${ns}`, 'sleep', '300'], { stdio: 'ignore' })
    const fd = openSync(ns, 'r')
    execFileSync('mount', ['--bind', ns, ns]) // a second mount stacked on the name
    try {
      assert.equal(await Sandbox.kill(sbx.sandboxId), true)
      assert.equal(await listed(sbx.sandboxId), false, 'killed sandbox still listed')
      const gone = await waitUntil(() => !netnsOf(sbx.sandboxId), 120_000, 500)
      assert.ok(gone, 'held namespace still named 2 min after the kill')
    } finally {
      holder.kill('SIGKILL')
      closeSync(fd)
      try { execFileSync('umount', ['-l', ns], { stdio: 'ignore' }) } catch {}
    }
  })
})
