// Every cell's stdout reaches the client, under concurrency, through the
// official @e2b/code-interpreter SDK (issue 24's soak: a few cells in
// thousands came back with empty output). ipykernel flushes a stream 0.2 s
// after a write, on a timer; a quick cell's timer fires during the next
// cell, and it used to send that cell's output the ZeroMQ way, where no
// client listens. Four sandboxes run, concurrently, quick print cells and
// pairs of a quick print followed at once by a print that outlasts the
// previous cell's timer.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { uniq, TEST_TIMEOUT } from './helpers.mjs'

const tag = `interpreter-stdout-${uniq()}`
const created = []
after(() => Promise.allSettled(created.map((id) => Sandbox.kill(id))))

const SANDBOXES = 4
const QUICK = 30 // quick print cells per sandbox
const PAIRS = 10 // quick print, then print + 0.3 s, per sandbox

async function stdoutOf (sbx, code) {
  const ex = await sbx.runCode(code, { timeoutMs: 60_000 })
  assert.equal(ex.error, undefined, `cell ${JSON.stringify(code)} failed: ${ex.error?.name} ${ex.error?.value}`)
  return ex.logs.stdout.join('')
}

describe('interpreter stdout under load', { timeout: TEST_TIMEOUT * 6 }, () => {
  it('each cell of four concurrent sandboxes prints what it printed', { timeout: TEST_TIMEOUT * 6 }, async () => {
    const lost = []
    await Promise.all(Array.from({ length: SANDBOXES }, async (_, s) => {
      const sbx = await Sandbox.create({ timeoutMs: 300_000, metadata: { 'e2e-suite': tag } })
      created.push(sbx.sandboxId)
      try {
        await stdoutOf(sbx, 'import time')
        for (let i = 0; i < QUICK; i++) {
          const want = String(s * 1_000_000 + i)
          const got = await stdoutOf(sbx, `x_${i} = ${want}\nprint(x_${i})`)
          if (got.trim() !== want) lost.push(`sandbox ${s} quick cell ${i}: printed ${JSON.stringify(got)}`)
        }
        for (let i = 0; i < PAIRS; i++) {
          const a = `a${s}_${i}`
          const b = `b${s}_${i}`
          const gotA = await stdoutOf(sbx, `print(${JSON.stringify(a)})`)
          if (gotA !== a + '\n') lost.push(`sandbox ${s} ${a}: printed ${JSON.stringify(gotA)}`)
          const gotB = await stdoutOf(sbx, `print(${JSON.stringify(b)})\ntime.sleep(0.3)`)
          if (gotB !== b + '\n') lost.push(`sandbox ${s} ${b}: printed ${JSON.stringify(gotB)}`)
        }
      } finally {
        await sbx.kill().catch(() => {})
      }
    }))
    assert.deepEqual(lost, [], `${lost.length} of ${SANDBOXES * (QUICK + 2 * PAIRS)} cells lost their stdout`)
  })
})
