// The template chooses the interpreter's warm-up (issue 24): a file in its
// root filesystem, /etc/airlock/interpreter-warmup.py, read by the agent at
// start (absent: the default imports of numpy, pandas and matplotlib; empty:
// none). A template built with the SDK from code-interpreter-v1 with an empty
// file has no pandas loaded before the user's first import, and its cells
// work; the default template has pandas loaded before any cell; a warm-up
// that fails does not show in the first cell.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { Template } from 'e2b'
import { Sandbox } from '@e2b/code-interpreter'
import { uniq, TEST_TIMEOUT } from './helpers.mjs'

const tag = `interpreter-warmup-${uniq()}`
const lean = `e2e-warmup-lean-${uniq()}`
const broken = `e2e-warmup-broken-${uniq()}`
const created = []

async function api (method, path) {
  const res = await fetch(process.env.E2B_API_URL + path, { method, headers: { 'X-API-Key': process.env.E2B_API_KEY } })
  return res.status
}

after(async () => {
  await Promise.allSettled(created.map((id) => Sandbox.kill(id)))
  for (const name of [lean, broken]) await api('DELETE', `/templates/${name}`).catch(() => {})
})

/** code-interpreter-v1 whose warm-up file holds content (written with printf). */
function withWarmup (content) {
  return Template()
    .fromTemplate('code-interpreter-v1')
    .runCmd(`mkdir -p /etc/airlock && printf '${content}' > /etc/airlock/interpreter-warmup.py`, { user: 'root' })
}

async function create (template) {
  const sbx = await Sandbox.create(template, { timeoutMs: 300_000, metadata: { 'e2e-suite': tag } })
  created.push(sbx.sandboxId)
  return sbx
}

const loaded = "import sys\n[m for m in ('numpy', 'pandas', 'matplotlib') if m in sys.modules]"

describe('the template chooses the interpreter warm-up', { timeout: 900_000 }, () => {
  it('the default template has numpy, pandas and matplotlib loaded before the first cell', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await create('code-interpreter-v1')
    try {
      const r = await sbx.runCode(loaded)
      assert.equal(r.error, undefined, JSON.stringify(r.error))
      assert.equal(r.text, "['numpy', 'pandas', 'matplotlib']")
      assert.equal(r.executionCount, 1)
    } finally {
      await sbx.kill().catch(() => {})
    }
  })

  it('a template with an empty warm-up file loads none of them until the user imports them', { timeout: 600_000 }, async () => {
    await Template.build(withWarmup(''), lean, { cpuCount: 1, memoryMB: 1024 })
    const sbx = await create(lean)
    try {
      let r = await sbx.runCode(loaded)
      assert.equal(r.error, undefined, JSON.stringify(r.error))
      assert.equal(r.text, '[]', 'nothing of the default warm-up is loaded')
      assert.equal(r.executionCount, 1)
      const t = performance.now()
      r = await sbx.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2, 3]}).a.sum()")
      const importMs = performance.now() - t
      assert.equal(r.error, undefined, JSON.stringify(r.error))
      assert.equal(r.text, '6')
      r = await sbx.runCode(loaded)
      assert.equal(r.text, "['numpy', 'pandas']")
      console.log(`lean template: first \`import pandas\` cell ${importMs.toFixed(0)} ms`)
    } finally {
      await sbx.kill().catch(() => {})
    }
  })

  it('a warm-up that fails leaves the first cell clean (cell 1, no error) and keeps what ran before the failure', { timeout: 600_000 }, async () => {
    await Template.build(withWarmup('import json\\nwarm_mark = 41\\nimport no_such_module_airlock\\nwarm_after = 1\\n'), broken, { cpuCount: 1, memoryMB: 1024 })
    const sbx = await create(broken)
    try {
      const r = await sbx.runCode("import sys\n(warm_mark + 1, 'warm_after' in dir(), 'pandas' in sys.modules)")
      assert.equal(r.error, undefined, `the warm-up's error reached the first cell: ${JSON.stringify(r.error)}`)
      assert.equal(r.text, '(42, False, False)')
      assert.equal(r.executionCount, 1)
      assert.deepEqual(r.logs.stderr, [])
    } finally {
      await sbx.kill().catch(() => {})
    }
  })
})
