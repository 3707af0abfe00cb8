// E2B's own CLI (npm @e2b/cli): `e2b template create <name>` in a directory
// holding an e2b.Dockerfile builds through the v3 template API (the CLI turns
// the Dockerfile into SDK steps), then the SDK starts a sandbox from it.
import { describe, it, after, before } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Template } from 'e2b'
import { tracker, uniq, sh, TEST_TIMEOUT } from './helpers.mjs'

const E2B = fileURLToPath(new URL('./node_modules/.bin/e2b', import.meta.url))
const t = tracker('templates-cli')
const dir = mkdtempSync(join(tmpdir(), 'airlock-e2e-cli-'))
const name = `e2e-cli-${uniq()}`
const token = uniq()

/** Runs the E2B CLI; resolves {code, out} (stdout and stderr together). */
function e2b (args) {
  return new Promise((resolve, reject) => {
    const p = spawn(E2B, args, { env: { ...process.env, NO_COLOR: '1', E2B_DEBUG: '' } })
    let out = ''
    p.stdout.on('data', (d) => { out += d })
    p.stderr.on('data', (d) => { out += d })
    p.on('error', reject)
    p.on('close', (code) => resolve({ code, out }))
  })
}

before(() => {
  writeFileSync(join(dir, 'e2b.Dockerfile'), [
    'FROM e2bdev/base',
    `RUN echo cli-${token} > /opt/cli.txt`,
    'COPY hello.txt /home/user/hello.txt',
    'ENV CLI_MODE=yes',
    'WORKDIR /home/user'
  ].join('\n') + '\n')
  writeFileSync(join(dir, 'hello.txt'), `hello ${token}\n`)
})

after(async () => {
  await t.killAll()
  await fetch(`${process.env.E2B_API_URL}/templates/${name}`, { method: 'DELETE', headers: { 'X-API-Key': process.env.E2B_API_KEY } }).catch(() => {})
  rmSync(dir, { recursive: true, force: true })
})

describe('E2B CLI', { timeout: 600_000 }, () => {
  it('e2b template create builds an e2b.Dockerfile; a sandbox starts from it', { timeout: 600_000 }, async () => {
    const res = await e2b(['template', 'create', name, '-p', dir, '--memory-mb', '512', '--cpu-count', '1'])
    assert.equal(res.code, 0, res.out)
    assert.match(res.out, /Found (\.\/)?e2b\.Dockerfile/)
    assert.equal(await Template.exists(name), true)
    const list = await e2b(['template', 'list', '--format', 'json'])
    assert.equal(list.code, 0, list.out)
    const listed = JSON.parse(list.out.slice(list.out.search(/^\[/m))).filter((x) => x.templateID === name)
    assert.equal(listed.length, 1, list.out)
    assert.deepEqual(listed[0].aliases, [name])

    const sbx = await t.create({ template: name })
    const r = await sh(sbx, 'cat /opt/cli.txt hello.txt; echo "$CLI_MODE"; id -un; pwd')
    assert.equal(r.exitCode, 0, r.stderr)
    assert.deepEqual(r.stdout.trim().split('\n'), [`cli-${token}`, `hello ${token}`, 'yes', 'user', '/home/user'])
  })

  it('a failing RUN fails the CLI with the step in the message', { timeout: TEST_TIMEOUT }, async () => {
    writeFileSync(join(dir, 'e2b.Dockerfile'), 'FROM e2bdev/base\nRUN echo nope; exit 7\n')
    const res = await e2b(['template', 'create', `${name}-bad`, '-p', dir])
    assert.notEqual(res.code, 0, res.out)
    assert.match(res.out, /step 3 \(RUN echo nope; exit 7\)/)
    assert.match(res.out, /non-zero code: 7/)
  })
})
