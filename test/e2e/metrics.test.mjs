// Sandbox metrics through the official E2B SDK (sbx.getMetrics) and the
// daemon's Prometheus endpoint.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError } from 'e2b'
import { tracker, waitUntil, sleep, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('metrics')
after(() => t.killAll())

describe('sandbox metrics', { timeout: TEST_TIMEOUT * 2 }, () => {
  it('getMetrics: a sample soon after start, CPU and disk follow the workload, windows filter', { timeout: TEST_TIMEOUT }, async () => {
    const created = Date.now()
    const sbx = await t.create()

    const first = await waitUntil(async () => {
      const m = await sbx.getMetrics()
      return m.length > 0 ? m : null
    }, 30_000, 500)
    assert.ok(first, 'no metric sample within 30 s of start')
    assert.ok(Date.now() - created < 30_000)
    const s = first[0]
    assert.ok(s.timestamp instanceof Date && !isNaN(s.timestamp), `timestamp ${s.timestamp}`)
    assert.ok(Math.abs(s.timestamp.getTime() - created) < 30_000, `sample at ${s.timestamp.toISOString()}, created ${new Date(created).toISOString()}`)
    const info = await sbx.getInfo()
    assert.equal(s.cpuCount, info.cpuCount)
    assert.ok(s.memTotal > 0 && s.memTotal <= info.memoryMB * 1024 * 1024, `memTotal ${s.memTotal} vs ${info.memoryMB} MiB`)
    assert.ok(s.memUsed > 0 && s.memUsed < s.memTotal, `memUsed ${s.memUsed}`)
    assert.ok(s.diskTotal > 0, `diskTotal ${s.diskTotal}`)

    // Busy loop on one CPU and 64 MiB written to the writable layer.
    const busyFrom = new Date()
    await sbx.commands.run('dd if=/dev/urandom of=/home/user/blob bs=1M count=64 status=none')
    await sbx.commands.run('timeout 12 sh -c "while :; do :; done" || true', { timeoutMs: 30_000 })
    await sleep(6_000) // at least one sampling interval after the loop
    const during = await sbx.getMetrics({ start: busyFrom })
    assert.ok(during.length >= 2, `only ${during.length} samples during a 12 s busy loop`)
    for (const m of during) assert.ok(m.timestamp.getTime() >= Math.floor(busyFrom.getTime() / 1000) * 1000, 'sample before start')
    const peak = Math.max(...during.map((m) => m.cpuUsedPct))
    assert.ok(peak >= 20, `peak cpuUsedPct ${peak} during a busy loop on 1 of ${s.cpuCount} CPUs`)
    const last = during[during.length - 1]
    assert.ok(last.diskUsed >= s.diskUsed + 60 * 1024 * 1024, `diskUsed ${s.diskUsed} → ${last.diskUsed} after writing 64 MiB`)

    // A window an hour in the past is empty.
    const hourAgo = new Date(Date.now() - 3600_000)
    const old = await sbx.getMetrics({ start: new Date(hourAgo.getTime() - 600_000), end: hourAgo })
    assert.deepEqual(old, [])

    // The static form works too, and a killed sandbox is not found.
    const again = await Sandbox.getMetrics(sbx.sandboxId)
    assert.ok(again.length >= during.length)
    await sbx.kill()
    await assert.rejects(Sandbox.getMetrics(sbx.sandboxId), SandboxNotFoundError)
  })

  it('CPU is measured after a restore (pause/resume; forks and snapshots restore the same way)', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create()
    assert.equal(await sbx.betaPause(), true)
    const resumed = await Sandbox.connect(sbx.sandboxId)
    const busyFrom = new Date()
    await resumed.commands.run('timeout 10 sh -c "while :; do :; done" || true', { timeoutMs: 30_000 })
    await sleep(6_000)
    const during = await resumed.getMetrics({ start: busyFrom })
    assert.ok(during.length >= 2, `only ${during.length} samples during a 10 s busy loop`)
    const peak = Math.max(...during.map((m) => m.cpuUsedPct))
    assert.ok(peak >= 20, `peak cpuUsedPct ${peak} during a busy loop in a resumed sandbox`)
  })

  it('Prometheus /metrics needs the API key and reports sandboxes and creates', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create()
    const url = `${process.env.E2B_API_URL}/metrics`
    assert.equal((await fetch(url)).status, 401)
    const text = await waitUntil(async () => {
      const res = await fetch(url, { headers: { Authorization: `Bearer ${process.env.E2B_API_KEY}` } })
      assert.equal(res.status, 200)
      const body = await res.text()
      return body.includes(`sandbox_id="${sbx.sandboxId}"`) ? body : null
    }, 30_000, 500)
    assert.ok(text, `no per-sandbox gauges for ${sbx.sandboxId}`)
    const value = (name) => {
      const line = text.split('\n').find((l) => l.startsWith(name + ' ') || l.startsWith(name + '{'))
      assert.ok(line, `no ${name} in the exposition`)
      return Number(line.split(' ').pop())
    }
    assert.ok(value('airlock_sandboxes_running') >= 1)
    assert.ok(value('airlock_sandbox_creates_total{result="success"}') >= 1)
    assert.ok(value('airlock_sandbox_create_duration_seconds_count') >= 1)
    assert.ok(value(`airlock_sandbox_memory_used_bytes{sandbox_id="${sbx.sandboxId}"}`) > 0)
    value('airlock_errors_total{op="create"}')
    await sbx.kill()
  })
})
