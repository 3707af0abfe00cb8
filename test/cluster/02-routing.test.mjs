// Sandbox traffic through EACH api instance directly (the SDK's apiUrl and
// sandboxUrl both point at it): a command, a streamed command whose output
// arrives in chunks as it is written (no buffering on the api → node hop),
// files, a PTY, and runCode on code-interpreter-v1 with @e2b/code-interpreter.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { Sandbox } from 'e2b'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'
import { LB, API1, API2, API_KEY, NODE_IDS, api, tracker, via, waitUntil, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('routing')
after(() => t.killAll())

for (const [name, base] of [['api1', API1], ['api2', API2]]) {
  describe(`through ${name} directly`, { timeout: TEST_TIMEOUT * 6 }, () => {
    let sbx
    before(async () => {
      sbx = await t.create({ ...via(base) })
    })
    after(async () => {
      if (sbx) await Sandbox.kill(sbx.sandboxId, via(base)).catch(() => {})
    })

    it('the create answered from a node, and GET names the same node', { timeout: TEST_TIMEOUT }, async () => {
      const r = await api(base, 'GET', `/sandboxes/${sbx.sandboxId}`)
      assert.equal(r.status, 200, r.text)
      assert.ok(NODE_IDS.includes(r.node), `X-Airlock-Node ${r.node}`)
      assert.equal(r.body.sandboxID, sbx.sandboxId)
    })

    it('commands.run', { timeout: TEST_TIMEOUT }, async () => {
      const r = await sbx.commands.run('echo "$((6*7)) $(whoami) $(hostname)"; echo err >&2')
      assert.equal(r.exitCode, 0)
      // The hostname is the sandbox's id: the command ran in this sandbox.
      assert.equal(r.stdout, `42 user ${sbx.sandboxId}\n`)
      assert.equal(r.stderr, 'err\n')
    })

    it('a streamed command delivers stdout chunks as they are written', { timeout: TEST_TIMEOUT }, async () => {
      const chunks = []
      const start = Date.now()
      const r = await sbx.commands.run('for i in 1 2 3 4 5 6; do echo "chunk-$i"; sleep 0.4; done', {
        onStdout: (d) => chunks.push({ d, at: Date.now() - start })
      })
      assert.equal(r.exitCode, 0)
      assert.equal(chunks.map((c) => c.d).join(''), [1, 2, 3, 4, 5, 6].map((i) => `chunk-${i}\n`).join(''))
      assert.equal(r.stdout, chunks.map((c) => c.d).join(''))
      // Six lines written 0.4 s apart: a buffering proxy would deliver them
      // in one piece at the end.
      assert.ok(chunks.length >= 4, `stdout came in ${chunks.length} chunk(s): ${JSON.stringify(chunks)}`)
      const first = chunks.find((c) => c.d.includes('chunk-1'))
      const last = chunks.find((c) => c.d.includes('chunk-6'))
      assert.ok(last.at - first.at >= 1_200, `chunk-1 at ${first.at} ms, chunk-6 at ${last.at} ms: not streamed`)
    })

    it('files: write and read back (text and 256 KiB binary), list', { timeout: TEST_TIMEOUT }, async () => {
      const dir = `/home/user/routing-${name}`
      await sbx.files.makeDir(dir)
      await sbx.files.write(`${dir}/hello.txt`, `hello through ${name}\n`)
      assert.equal(await sbx.files.read(`${dir}/hello.txt`), `hello through ${name}\n`)
      const blob = randomBytes(256 * 1024)
      await sbx.files.write(`${dir}/blob.bin`, blob.buffer.slice(blob.byteOffset, blob.byteOffset + blob.byteLength))
      const back = Buffer.from(await sbx.files.read(`${dir}/blob.bin`, { format: 'bytes' }))
      assert.ok(back.equals(blob), `binary file differs (${back.length} bytes back)`)
      const entries = (await sbx.files.list(dir)).map((e) => e.name).sort()
      assert.deepEqual(entries, ['blob.bin', 'hello.txt'])
      // The command side sees the same file.
      const r = await sbx.commands.run(`sha256sum ${dir}/blob.bin | cut -d' ' -f1`)
      const { createHash } = await import('node:crypto')
      assert.equal(r.stdout.trim(), createHash('sha256').update(blob).digest('hex'))
    })

    it('pty: create, send input, read output', { timeout: TEST_TIMEOUT }, async () => {
      let out = ''
      const dec = new TextDecoder()
      const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d, { stream: true }) }, timeoutMs: 60_000 })
      assert.ok(h.pid > 0)
      await sbx.pty.sendInput(h.pid, new TextEncoder().encode(`echo pty-${name}-$((40+2)); tty\n`))
      assert.ok(await waitUntil(() => out.includes(`pty-${name}-42`), 15_000), `no echo in pty output: ${JSON.stringify(out)}`)
      assert.ok(await waitUntil(() => /\/dev\/pts\/\d+/.test(out), 5_000), `no tty in pty output: ${JSON.stringify(out)}`)
      await sbx.pty.sendInput(h.pid, new TextEncoder().encode('exit 0\n'))
      const r = await h.wait()
      assert.equal(r.exitCode, 0)
    })

    it('runCode on code-interpreter-v1 (@e2b/code-interpreter)', { timeout: TEST_TIMEOUT }, async () => {
      const ci = await CodeSandbox.create({ ...via(base), timeoutMs: 300_000, metadata: t.metadata })
      t.add(ci.sandboxId)
      try {
        let ex = await ci.runCode('x = 6 * 7\nprint("printed", x)\nx', { timeoutMs: 120_000 })
        assert.equal(ex.error, undefined, JSON.stringify(ex.error))
        assert.equal(ex.text, '42')
        assert.deepEqual(ex.logs.stdout, ['printed 42\n'])
        // State stays in the kernel across cells.
        ex = await ci.runCode('x + 1', { timeoutMs: 60_000 })
        assert.equal(ex.text, '43')
        ex = await ci.runCode('1 / 0', { timeoutMs: 60_000 })
        assert.equal(ex.error?.name, 'ZeroDivisionError')
      } finally {
        await CodeSandbox.kill(ci.sandboxId, via(base)).catch(() => {})
        t.forget(ci.sandboxId)
      }
    })
  })
}

describe('GET /metrics through the api tier', () => {
  it("is every node's Prometheus metrics, each sample labelled with its node", async () => {
    for (const base of [LB, API1, API2]) {
      const r = await fetch(base + '/metrics', { headers: { 'X-API-Key': API_KEY, Accept: 'application/openmetrics-text' } })
      const text = await r.text()
      assert.equal(r.status, 200, `${base}/metrics: ${r.status} ${text.slice(0, 300)}`)
      assert.match(r.headers.get('content-type') || '', /^text\/plain/)
      for (const id of NODE_IDS) {
        assert.ok(text.includes(`airlock_node="${id}"`), `${base}/metrics has no sample of ${id}:\n${text.slice(0, 500)}`)
      }
      assert.equal(r.headers.get('x-airlock-partial'), null)
    }
    const anon = await fetch(LB + '/metrics')
    assert.equal(anon.status, 401)
  })
})
