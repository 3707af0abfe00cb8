// The SDK surface against a daemon started with `--runtime microvm`
// (scripts/test.sh's microVM stage): every sandbox is a QEMU microVM with
// its own kernel, emulated (TCG) on hosts without hardware KVM, so the
// timeouts are generous. Skipped files never hide this: the stage runs this
// file only, against its own daemon.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { Sandbox, CommandExitError, TimeoutError } from 'e2b'
import { tracker, uniq, waitUntil } from './helpers.mjs'

const T = 300_000
const t = tracker('microvm')
after(() => t.killAll())

describe('microVM runtime', { timeout: T * 4 }, () => {
  let sbx
  before(async () => {
    sbx = await t.create({ envs: { AIRLOCK_VM_ENV: 'from-create' } })
  })

  it('GET /health names the microvm runtime and why', async () => {
    const res = await fetch(new URL('/health', process.env.E2B_API_URL))
    const body = await res.json()
    assert.equal(res.status, 200)
    assert.equal(body.runtime, 'microvm')
    assert.ok(body.runtimeReason.length > 0)
  })

  it('runs the guest kernel with virtio devices, not the host kernel', { timeout: T }, async () => {
    const r = await sbx.commands.run('uname -r; ls /sys/bus/virtio/devices | wc -l; cat /proc/1/cmdline | tr "\\0" " "')
    const [release, virtio, init] = r.stdout.trim().split('\n')
    const host = readFileSync('/proc/sys/kernel/osrelease', 'utf8').trim()
    assert.notEqual(release, host)
    assert.match(release, /^6\.1\./)
    assert.ok(Number(virtio) >= 3, `virtio devices: ${virtio}`)
    assert.match(init, /airlock-envd/)
  })

  it('commands: stdout, stderr, exit codes, env vars', { timeout: T }, async () => {
    const r = await sbx.commands.run('echo out; echo err >&2; echo $AIRLOCK_VM_ENV $CMD_ENV', { envs: { CMD_ENV: 'from-cmd' } })
    assert.equal(r.stdout, 'out\nfrom-create from-cmd\n')
    assert.equal(r.stderr, 'err\n')
    await assert.rejects(sbx.commands.run('exit 7'), (err) => err instanceof CommandExitError && err.exitCode === 7)
  })

  it('files: write, read, list, and visible to commands', { timeout: T }, async () => {
    const body = `hello-${uniq()}`
    await sbx.files.write('/home/user/vm.txt', body)
    assert.equal(await sbx.files.read('/home/user/vm.txt'), body)
    const names = (await sbx.files.list('/home/user')).map((e) => e.name)
    assert.ok(names.includes('vm.txt'), JSON.stringify(names))
    const r = await sbx.commands.run('cat /home/user/vm.txt; df -m / | tail -1')
    assert.ok(r.stdout.startsWith(body), r.stdout)
  })

  it('pty: input, output, exit', { timeout: T }, async () => {
    let out = ''
    const dec = new TextDecoder()
    const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d, { stream: true }) }, timeoutMs: 120_000 })
    await sbx.pty.sendInput(h.pid, new TextEncoder().encode('echo vm-$((40+2)); tty\n'))
    assert.ok(await waitUntil(() => out.includes('vm-42'), 60_000), `no echo in pty output: ${JSON.stringify(out)}`)
    assert.ok(await waitUntil(() => /\/dev\/pts\/\d+/.test(out), 30_000), `no tty: ${JSON.stringify(out)}`)
    await sbx.pty.sendInput(h.pid, new TextEncoder().encode('exit 0\n'))
    assert.equal((await h.wait()).exitCode, 0)
  })

  it('kill: a background command, then the sandbox', { timeout: T }, async () => {
    const h = await sbx.commands.run('sleep 600', { background: true })
    assert.equal(await sbx.commands.kill(h.pid), true)
    await assert.rejects(h.wait(), CommandExitError)
    await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 3_000 }), TimeoutError)

    const other = await t.create()
    assert.equal((await other.commands.run('echo up')).stdout, 'up\n')
    await Sandbox.kill(other.sandboxId)
    const gone = await waitUntil(async () => {
      try { await Sandbox.getInfo(other.sandboxId); return false } catch { return true }
    }, 30_000, 500)
    assert.ok(gone, 'killed microVM sandbox still listed')
  })

  it('pause and resume keep processes, files and the disk', { timeout: T }, async () => {
    const s = await t.create()
    await s.commands.run('sleep 1000 >/dev/null 2>&1 & echo $! > /tmp/pid; echo before > /home/user/p.txt')
    assert.equal(await s.betaPause(), true)
    assert.equal((await Sandbox.getInfo(s.sandboxId)).state, 'paused')
    const resumed = await Sandbox.connect(s.sandboxId)
    const r = await resumed.commands.run('kill -0 $(cat /tmp/pid) && cat /home/user/p.txt')
    assert.equal(r.stdout, 'before\n')
    assert.equal((await Sandbox.getInfo(s.sandboxId)).state, 'running')
  })

  it('sandbox timeout ends the VM', { timeout: T }, async () => {
    const short = await t.create({ timeoutMs: 10_000 })
    assert.equal((await short.commands.run('echo alive')).stdout, 'alive\n')
    const gone = await waitUntil(async () => !(await Sandbox.list().nextItems()).some((s) => s.sandboxId === short.sandboxId), 60_000, 1_000)
    assert.ok(gone, 'sandbox still running after its timeout')
  })
})
