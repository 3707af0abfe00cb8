// A template defined in code (the SDK's Template.build, E2B's v3 build API)
// against the microVM daemon (scripts/test-microvm.sh): the RUN step runs in
// a build microVM and its layer comes from the VM's disk, the COPY's files
// are uploaded to the daemon, and Sandbox.create('name:tag') boots a VM of
// the result. Kept small: TCG is slow.
import { describe, it, after, before } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Template } from 'e2b'
import { tracker, uniq, sh } from './helpers.mjs'

const T = 300_000
const t = tracker('microvm-sdk')
const ctxDir = mkdtempSync(join(tmpdir(), 'airlock-e2e-vmsdk-'))
const name = `vmsdk-${uniq()}`
const token = uniq()

before(() => {
  writeFileSync(join(ctxDir, 'hello.txt'), `hello ${token}\n`)
})

after(async () => {
  await t.killAll()
  await fetch(`${process.env.E2B_API_URL}/templates/tags`, {
    method: 'DELETE',
    headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
    body: JSON.stringify({ name, tags: ['v1'] })
  }).catch(() => {})
  rmSync(ctxDir, { recursive: true, force: true })
})

describe('SDK Template.build on the microVM runtime', { timeout: T * 2 }, () => {
  it('fromTemplate(base) + copy + runCmd + setEnvs builds name:v1; Sandbox.create(name:v1) sees the files, the env and the owner', { timeout: T * 2 }, async () => {
    const tpl = Template({ fileContextPath: ctxDir })
      .fromTemplate('base')
      .copy('hello.txt', '/home/user/hello.txt') // 1
      .runCmd(`echo vm-${token} > /home/user/made.txt && cat /home/user/hello.txt >> /home/user/made.txt`) // 2
      .setEnvs({ VM_SDK: token }) // 3
    const logs = []
    const started = Date.now()
    const info = await Template.build(tpl, `${name}:v1`, { onBuildLogs: (e) => logs.push(e.message) })
    const buildMs = Date.now() - started
    const log = logs.join('\n')
    assert.equal(info.templateId, name)
    assert.match(log, /\[2\/3\] RUN echo vm-/, log)
    assert.match(log, /built \(tags v1\)/, log)
    assert.equal(await Template.exists(`${name}:v1`), true)
    assert.equal(await Template.exists(`${name}:v2`), false)

    const sbx = await t.create({ template: `${name}:v1` })
    const r = await sh(sbx, 'cat hello.txt made.txt; echo "$VM_SDK"; id -un; pwd; stat -c %U hello.txt made.txt; uname -r')
    assert.equal(r.exitCode, 0, r.stderr)
    const lines = r.stdout.trim().split('\n')
    assert.deepEqual(lines.slice(0, 8), [`hello ${token}`, `vm-${token}`, `hello ${token}`, token, 'user', '/home/user', 'user', 'user'])
    await sbx.kill()
    console.log(`# SDK build on the microVM runtime: ${buildMs} ms (cold); guest kernel ${lines[8]}`)
  })
})
