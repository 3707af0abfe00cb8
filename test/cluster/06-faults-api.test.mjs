// Fault: SIGKILL of api1 in the middle of a command's output stream through
// api1. The stream breaks; the client retries through haproxy (which takes
// api1 out and sends the requests to api2), re-attaches to the command,
// which kept running on its node, and finds nothing lost. Then api1 is
// started again with the command run-cluster.sh used and serves again.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { LB, API1, api, tracker, via, waitUntil, killDaemon, restartDaemon, waitHealthy, logTail, sleep, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('faults-api')
after(async () => {
  // Whatever happened, leave api1 running for the next files.
  try {
    await waitHealthy(API1, 1_000)
  } catch {
    try { restartDaemon('api1') } catch {}
    await waitHealthy(API1, 60_000).catch(() => {})
  }
  await t.killAll()
})

describe('api instance killed mid-stream', { timeout: TEST_TIMEOUT * 2 }, () => {
  it('SIGKILL of api1 during a streamed command: the retry through haproxy re-attaches and nothing is lost', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create({ ...via(LB) })
    await sbx.files.write('/home/user/before.txt', 'written before the kill\n')

    const direct = await Sandbox.connect(sbx.sandboxId, via(API1))
    const seen = []
    const N = 40
    const h = await direct.commands.run(`for i in $(seq 1 ${N}); do echo "tick-$i" | tee -a /home/user/ticks; sleep 0.25; done`, {
      background: true,
      onStdout: (d) => seen.push(d)
    })
    assert.ok(await waitUntil(() => seen.join('').includes('tick-3\n'), 15_000, 50), `no output through api1: ${JSON.stringify(seen)}`)
    const ended = h.wait().then(() => 'resolved', (e) => `rejected: ${e?.name}: ${e?.message}`)

    await killDaemon('api1')
    const killedAt = Date.now()
    const outcome = await Promise.race([ended, sleep(20_000).then(() => 'hung')])
    assert.notEqual(outcome, 'hung', 'the stream through the killed api1 neither ended nor failed within 20 s')
    assert.notEqual(outcome, 'resolved', 'the stream through the killed api1 completed as if nothing happened')
    const before = seen.join('')

    // The client's retry goes through the balancer: the first requests may
    // still be sent to api1 (down within ~2 s), and are redispatched.
    const again = await Sandbox.connect(sbx.sandboxId, via(LB))
    const rest = []
    const attached = await again.commands.connect(h.pid, { onStdout: (d) => rest.push(d) })
    const r = await attached.wait()
    assert.equal(r.exitCode, 0)
    const retryMs = Date.now() - killedAt
    assert.ok(rest.join('').includes(`tick-${N}\n`), `re-attached output ends without tick-${N}: ${JSON.stringify(rest.join(''))}`)

    // Nothing lost: every line was written once, in order, and the rest of
    // the sandbox is as it was.
    const ticks = (await again.files.read('/home/user/ticks')).trim().split('\n')
    assert.deepEqual(ticks, Array.from({ length: N }, (_, i) => `tick-${i + 1}`))
    assert.ok(before.length > 0 && `${ticks.join('\n')}\n`.startsWith(before), `output before the kill ${JSON.stringify(before)} is not a prefix of the ticks`)
    assert.equal(await again.files.read('/home/user/before.txt'), 'written before the kill\n')
    assert.equal((await again.commands.run('echo still-here')).stdout, 'still-here\n')
    assert.ok(retryMs < 30_000, `the retry took ${retryMs} ms`)

    // Requests through the balancer keep succeeding while api1 is down.
    for (let i = 0; i < 10; i++) {
      const g = await api(LB, 'GET', `/sandboxes/${sbx.sandboxId}`)
      assert.equal(g.status, 200, `GET ${i + 1} through haproxy with api1 down: ${g.status} ${g.text}`)
    }
  })

  it('api1 restarted with its run-cluster.sh command serves again, also behind haproxy', { timeout: TEST_TIMEOUT }, async () => {
    restartDaemon('api1')
    await waitHealthy(API1, 60_000, (b) => b?.nodes?.live === 3).catch((err) => {
      throw new Error(`${err.message}\n${logTail('api1')}`)
    })
    const sbx = await t.create({ ...via(API1) })
    assert.equal((await sbx.commands.run('echo back')).stdout, 'back\n')
    // haproxy puts api1 back (rise 1, checks every second): requests reach it.
    await sleep(2_500)
    for (let i = 0; i < 6; i++) {
      const g = await api(LB, 'GET', `/sandboxes/${sbx.sandboxId}`)
      assert.equal(g.status, 200, `GET ${i + 1} through haproxy: ${g.status} ${g.text}`)
    }
    const recent = logTail('haproxy', 8)
    assert.match(recent, /airlock_api\/api1 .*"GET \/sandboxes\//, `haproxy sent none of the last requests to the restarted api1:\n${recent}`)
  })
})
