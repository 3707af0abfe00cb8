// The code interpreter (code-interpreter-v1, @e2b/code-interpreter's
// runCode) on the microVM runtime, against the daemon of
// scripts/test-microvm.sh: `--templates base,code-interpreter-v1
// --warm-pool code-interpreter-v1=1` with boot snapshots on (the default).
// A default create is served from the warm pool; `allowInternetAccess:
// false` (not the pool's network set-up) restores the boot snapshot. The
// daemon log (AIRLOCK_TEST_VM_DAEMON_LOG) says which path served a create.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { Sandbox } from '@e2b/code-interpreter'
import { uniq, waitUntil, sh } from './helpers.mjs'

const T = 300_000
const LOG = process.env.AIRLOCK_TEST_VM_DAEMON_LOG
const tag = `microvm-interpreter-${uniq()}`
const created = []
after(() => Promise.allSettled(created.map((id) => Sandbox.kill(id))))

async function create (opts = {}) {
  const sbx = await Sandbox.create({ timeoutMs: T, ...opts, metadata: { 'e2e-suite': tag } })
  created.push(sbx.sandboxId)
  return sbx
}

function daemonLog () {
  assert.ok(LOG, 'AIRLOCK_TEST_VM_DAEMON_LOG is not set (scripts/test-microvm.sh sets it)')
  return readFileSync(LOG, 'utf8')
}

/** The daemon's log line that says how sandbox id was created. */
function createdLine (id) {
  return daemonLog().split('\n').find((l) => l.includes(`sandbox=${id}`) && /msg="sandbox created/.test(l)) ?? ''
}

/** Runs code and asserts it produced no error; returns the execution. */
async function ok (sbx, code, opts = {}) {
  const ex = await sbx.runCode(code, opts)
  assert.equal(ex.error, undefined, `${code}: ${ex.error?.name}: ${ex.error?.value}`)
  return ex
}

describe('code interpreter on microVMs', { timeout: T * 6 }, () => {
  before(async () => {
    // /health is 200 before the boot snapshot exists (made in the
    // background: ~15–40 s under TCG) and the pool is filled after it.
    const ready = await waitUntil(() => /boot snapshot ready.*template=code-interpreter-v1/.test(daemonLog()), 240_000, 1_000)
    assert.ok(ready, 'no "boot snapshot ready" for code-interpreter-v1 in the daemon log')
    const pooled = await waitUntil(() => /warm pool: sandbox ready.*template=code-interpreter-v1/.test(daemonLog()), 120_000, 1_000)
    assert.ok(pooled, 'the warm pool of code-interpreter-v1 was not filled')
  })

  it('a create from the warm pool: state across cells, a PNG, a DataFrame, a traceback, JS and Bash', { timeout: T }, async () => {
    const sbx = await create()
    assert.match(createdLine(sbx.sandboxId), /from the warm pool/)
    assert.equal((await ok(sbx, 'x = 41\nx + 1')).text, '42')
    assert.equal((await ok(sbx, 'x + 2')).text, '43')

    const png = await ok(sbx, 'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()')
    const pngs = png.results.filter((r) => r.png)
    assert.equal(pngs.length, 1, `results: ${JSON.stringify(png.results.map((r) => r.formats()))}`)
    const bytes = Buffer.from(pngs[0].png, 'base64')
    assert.deepEqual([...bytes.subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47], 'a PNG')
    assert.ok(bytes.length > 1000, `png is ${bytes.length} bytes`)

    const df = await ok(sbx, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
    assert.match(df.results[0]?.html ?? '', /<table/)
    assert.match(df.text, /a\s+b/)

    const err = await sbx.runCode('def f():\n    return 1 / 0\nf()')
    assert.equal(err.error?.name, 'ZeroDivisionError')
    assert.match(err.error.traceback, /ZeroDivisionError/)
    assert.equal((await ok(sbx, 'x')).text, '41', 'an error keeps the state')

    await ok(sbx, 'const jv = 20', { language: 'js' })
    assert.equal((await ok(sbx, 'jv * 2 + 2', { language: 'js' })).text, '42')
    const b = await ok(sbx, 'cd /tmp; echo "bash-$((40+2)) $(pwd)"', { language: 'bash' })
    assert.equal(b.logs.stdout.join(''), 'bash-42 /tmp\n')
  })

  it('creates served from the boot snapshot get their own id, randomness and address', { timeout: T }, async () => {
    const boxes = []
    for (let i = 0; i < 2; i++) boxes.push(await create({ allowInternetAccess: false }))
    const ids = new Set()
    const randoms = new Set()
    const urandoms = new Set()
    const ips = new Set()
    for (const b of boxes) {
      assert.match(createdLine(b.sandboxId), /from a snapshot.*boot snapshot of code-interpreter-v1/, 'served from the boot snapshot')
      const r = await ok(b, 'import os, random\nprint(os.environ["E2B_SANDBOX_ID"])\n(random.random(), 6 * 7)')
      assert.equal(r.logs.stdout.join('').trim(), b.sandboxId, 'E2B_SANDBOX_ID in the warm kernel is this sandbox')
      const [rnd, answer] = r.text.replace(/[()]/g, '').split(',').map((x) => x.trim())
      assert.equal(answer, '42')
      randoms.add(rnd)
      urandoms.add((await ok(b, 'os.urandom(16).hex()')).text)
      const s = await sh(b, "echo $E2B_SANDBOX_ID; ip -4 -o addr show eth0 | awk '{print $4}'")
      const [envID, ip] = s.stdout.trim().split('\n')
      ids.add(envID)
      ips.add(ip)
    }
    assert.equal(ids.size, 2, `distinct E2B_SANDBOX_IDs: ${[...ids]}`)
    assert.equal(ips.size, 2, `distinct addresses: ${[...ips]}`)
    assert.equal(randoms.size, 2, `distinct random.random() (reseeded guest RNG): ${[...randoms]}`)
    assert.equal(urandoms.size, 2, `distinct os.urandom() (reseeded guest RNG): ${[...urandoms]}`)
    await Promise.allSettled(boxes.map((b) => b.kill()))
  })

  it('a create with limits no boot snapshot was made with cold-boots and works', { timeout: T }, async () => {
    // (the SDK cannot send memoryMB; the raw API can)
    const res = await fetch(new URL('/sandboxes', process.env.E2B_API_URL), {
      method: 'POST',
      headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
      body: JSON.stringify({ templateID: 'code-interpreter-v1', timeout: 300, memoryMB: 513, metadata: { 'e2e-suite': tag } })
    })
    const text = await res.text()
    assert.equal(res.status, 201, text)
    const id = JSON.parse(text).sandboxID
    created.push(id)
    assert.match(createdLine(id), /msg="sandbox created" .*template=code-interpreter-v1/, 'cold-booted, not restored')
    const c = await Sandbox.connect(id)
    assert.equal((await ok(c, 'import os\nos.environ["E2B_SANDBOX_ID"]')).text.replace(/'/g, ''), id)
    await c.kill()
  })

  it('a cell that runs out of memory: the guest kernel kills the kernel, the cell gets OutOfMemoryError, the rest lives', { timeout: T }, async () => {
    const sbx = await create()
    const js = await sbx.createCodeContext({ language: 'js' })
    await ok(sbx, 'let kept = 41', { context: js })
    const ex = await sbx.runCode('b = []\nwhile True: b.append(bytearray(100 * 2**20))', { timeoutMs: 240_000 })
    assert.equal(ex.error?.name, 'OutOfMemoryError', JSON.stringify(ex.error))
    assert.equal((await ok(sbx, '6 * 7', { timeoutMs: 120_000 })).text, '42')
    assert.equal((await ok(sbx, 'kept + 1', { context: js })).text, '42')
    await sbx.kill()
  })

  it('pause and resume, and fork, keep Python and JavaScript state', { timeout: T }, async () => {
    const sbx = await create()
    await ok(sbx, 'kept = [1, 2, 3]')
    await ok(sbx, 'const jkept = 7', { language: 'js' })
    assert.equal(await sbx.betaPause(), true)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
    const resumed = await Sandbox.connect(sbx.sandboxId)
    assert.equal((await ok(resumed, 'sum(kept)')).text, '6')
    assert.equal((await ok(resumed, 'jkept * 6', { language: 'js' })).text, '42')

    const kids = await Sandbox.fork(sbx.sandboxId, { count: 2 })
    for (const k of kids) if (!(k instanceof Error)) created.push(k.sandboxId)
    for (const k of kids) assert.ok(!(k instanceof Error), `fork failed: ${k}`)
    const randoms = new Set()
    for (const [i, k] of kids.entries()) {
      const c = await Sandbox.connect(k.sandboxId)
      const r = await ok(c, `import os, random\nkept.append(${i})\nprint(os.environ["E2B_SANDBOX_ID"])\n(sum(kept), random.random())`)
      assert.equal(r.logs.stdout.join('').trim(), k.sandboxId)
      const [sum, rnd] = r.text.replace(/[()]/g, '').split(',').map((x) => x.trim())
      assert.equal(sum, String(6 + i))
      randoms.add(rnd)
    }
    assert.equal(randoms.size, 2, `fork children draw different random numbers: ${[...randoms]}`)
    assert.equal((await ok(resumed, 'sum(kept)')).text, '6', "the children's cells do not touch the parent")
    await Promise.allSettled(kids.map((k) => Sandbox.kill(k.sandboxId)))
  })
})
