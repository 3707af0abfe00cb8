// The default JavaScript context's node starts on its first use (issue 24:
// an idle interpreter sandbox does not carry a node it never runs): listed
// at once as before, no node process until then, and the first JavaScript
// cell answers with the sandbox's env vars and keeps its state. Prints the
// first JavaScript cell's time next to the second's.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { uniq, TEST_TIMEOUT } from './helpers.mjs'

const tag = `interpreter-lazyjs-${uniq()}`
const created = []
after(() => Promise.allSettled(created.map((id) => Sandbox.kill(id))))

async function nodeProcs (sbx) {
  const r = await sbx.commands.run("for f in /proc/[0-9]*/comm; do cat $f; done 2>/dev/null | grep -cx node || true")
  return Number(r.stdout.trim())
}

describe('the default JavaScript context starts on first use', () => {
  it('is listed at once, runs no node before its first cell, and that cell answers with the env vars', { timeout: TEST_TIMEOUT }, async () => {
    // {}: restored from the boot snapshot; secure + no public traffic: a cold boot.
    for (const opts of [{}, { secure: true, network: { allowPublicTraffic: false } }]) {
      const v = `lazy-${uniq()}`
      const sbx = await Sandbox.create({ timeoutMs: 300_000, envs: { AIRLOCK_LAZY_VAR: v }, metadata: { 'e2e-suite': tag }, ...opts })
      created.push(sbx.sandboxId)
      try {
        const listed = await sbx.listCodeContexts()
        assert.deepEqual(listed.map((c) => c.language), ['python', 'javascript'], JSON.stringify(listed))
        const py = await sbx.runCode('1 + 1')
        assert.equal(py.text, '2')
        assert.equal(await nodeProcs(sbx), 0, `options ${JSON.stringify(opts)}: node runs before any JavaScript cell`)

        let t = performance.now()
        const first = await sbx.runCode('const lazyX = 40; process.env.AIRLOCK_LAZY_VAR', { context: listed[1] })
        const firstMs = performance.now() - t
        assert.equal(first.error, undefined, JSON.stringify(first.error))
        assert.ok(first.text?.includes(v), `first JavaScript cell: ${JSON.stringify(first.toJSON?.() ?? first)}`)
        t = performance.now()
        const second = await sbx.runCode('lazyX + 2', { language: 'js' })
        const secondMs = performance.now() - t
        assert.equal(second.text, '42')
        console.log(`options ${JSON.stringify(opts)}: first JavaScript cell ${firstMs.toFixed(0)} ms (node started on demand), second ${secondMs.toFixed(0)} ms`)
        assert.equal(await nodeProcs(sbx), 1)
        assert.deepEqual((await sbx.listCodeContexts()).map((c) => c.id), listed.map((c) => c.id))
      } finally {
        await sbx.kill().catch(() => {})
      }
    }
  })
})
