// Custom templates from Dockerfiles: built by the airlock CLI through the
// daemon's build endpoint (every RUN inside a sandbox), then used through the
// official E2B SDK: Sandbox.create('<name>').
import { describe, it, after, before } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Sandbox, Template } from 'e2b'
import { tracker, uniq, sh, TEST_TIMEOUT } from './helpers.mjs'

const AIRLOCK = process.env.AIRLOCK_TEST_CLI ?? fileURLToPath(new URL('../../bin/airlock', import.meta.url))
const t = tracker('templates')
const ctxDir = mkdtempSync(join(tmpdir(), 'airlock-e2e-tpl-'))
const name = `e2e-web-${uniq()}`
const created = []

/** Runs the airlock CLI; resolves {code, stdout, stderr}. */
function airlock (args) {
  return new Promise((resolve, reject) => {
    const p = spawn(AIRLOCK, args, { env: process.env })
    let stdout = ''
    let stderr = ''
    p.stdout.on('data', (d) => { stdout += d })
    p.stderr.on('data', (d) => { stderr += d })
    p.on('error', reject)
    p.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

function dockerfile (token) {
  return [
    'FROM base', // 1
    'ENV APP_MODE=e2e GREETING="hello world"', // 2
    'RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends cowsay >/dev/null && rm -rf /var/lib/apt/lists/*', // 3
    'COPY --chown=user:user site/ /home/user/site/', // 4
    'USER user', // 5
    'WORKDIR /home/user/site', // 6
    `RUN echo "built-${token}" > build-id.txt && rm -f drop-me.txt`, // 7
    'CMD ["python3", "-m", "http.server", "8000"]' // 8
  ].join('\n') + '\n'
}

async function build (df, extra = []) {
  writeFileSync(join(ctxDir, 'Dockerfile'), df)
  return airlock(['template', 'build', '--name', name, '--memory-mb', '768',
    '--ready-cmd', 'curl -sf http://127.0.0.1:8000/index.html >/dev/null', ...extra, ctxDir])
}

/** The status word of step n in a build log ("CACHED", "DONE" or undefined). */
function stepStatus (log, n) {
  const m = log.match(new RegExp(`^\\[${n}/\\d+\\] (CACHED|DONE)`, 'm'))
  return m?.[1]
}

before(() => {
  mkdirSync(join(ctxDir, 'site', 'docs'), { recursive: true })
  writeFileSync(join(ctxDir, 'site', 'index.html'), '<h1>airlock template</h1>\n')
  writeFileSync(join(ctxDir, 'site', 'docs', 'a.txt'), 'nested file\n')
  writeFileSync(join(ctxDir, 'site', 'drop-me.txt'), 'removed by a RUN step\n')
  writeFileSync(join(ctxDir, 'site', 'secret.key'), 'must not be copied\n')
  writeFileSync(join(ctxDir, '.dockerignore'), '**/*.key\n')
})

after(async () => {
  await t.killAll()
  await Promise.allSettled(created.map((n) => airlock(['template', 'rm', n])))
  rmSync(ctxDir, { recursive: true, force: true })
})

describe('Dockerfile templates', { timeout: TEST_TIMEOUT * 6 }, () => {
  it('builds; a sandbox from it has the package, files, env, workdir and a ready server', { timeout: TEST_TIMEOUT * 3 }, async () => {
    const token = uniq()
    const first = await build(dockerfile(token))
    assert.equal(first.code, 0, `build failed:\n${first.stderr}`)
    created.push(name)
    assert.match(first.stderr, /\[1\/8\] FROM base/)
    assert.equal(stepStatus(first.stderr, 7), 'DONE', 'the step with a new token runs')

    const sbx = await t.create({ template: name })
    // The ready command passed before the sandbox was handed out: no retries.
    const page = await sh(sbx, 'curl -s http://127.0.0.1:8000/index.html')
    assert.equal(page.exitCode, 0)
    assert.match(page.stdout, /airlock template/)

    const who = await sh(sbx, 'whoami; pwd; echo "$APP_MODE|$GREETING"')
    assert.equal(who.stdout, 'user\n/home/user/site\ne2e|hello world\n')
    const cow = await sh(sbx, '/usr/games/cowsay moo')
    assert.equal(cow.exitCode, 0, cow.stderr)
    assert.match(cow.stdout, /moo/)
    const files = await sh(sbx, 'stat -c "%U:%G %n" index.html docs docs/a.txt build-id.txt && cat build-id.txt docs/a.txt')
    assert.equal(files.exitCode, 0, files.stderr)
    assert.equal(files.stdout,
      `user:user index.html\nuser:user docs\nuser:user docs/a.txt\nuser:user build-id.txt\nbuilt-${token}\nnested file\n`)
    const gone = await sh(sbx, 'ls drop-me.txt secret.key 2>&1; ls -l /etc/ld.so.preload 2>&1; ls -l index.html')
    assert.match(gone.stdout, /drop-me.txt': No such file/, 'a file deleted by RUN is gone (whiteout)')
    assert.match(gone.stdout, /secret.key': No such file/, '.dockerignore honoured')
    assert.match(gone.stdout, /ld.so.preload': No such file/, 'no preload library (the statx shim for runsc 20221219 is gone)')
    assert.match(gone.stdout, /-rw.* user user .* index\.html/, 'ls -l (statx with AT_NO_AUTOMOUNT) works')
    const info = await sbx.getInfo()
    assert.equal(info.memoryMB, 768)

    const rm = await airlock(['template', 'rm', name])
    assert.notEqual(rm.code, 0, 'rm must be refused while a sandbox uses the template')
    assert.match(rm.stderr, /in use/)
    await sbx.kill()
  })

  it('a rebuild uses the cache for every step; changing one line reruns from that line', { timeout: TEST_TIMEOUT * 2 }, async () => {
    const token = uniq()
    const a = await build(dockerfile(token))
    assert.equal(a.code, 0, a.stderr)
    const same = await build(dockerfile(token))
    assert.equal(same.code, 0, same.stderr)
    for (const n of [3, 4, 7]) {
      assert.equal(stepStatus(same.stderr, n), 'CACHED', `step ${n} cached on an unchanged rebuild:\n${same.stderr}`)
    }
    assert.match(same.stderr, /3 of 3 filesystem steps cached/)

    const changed = await build(dockerfile(`${token}-changed`))
    assert.equal(changed.code, 0, changed.stderr)
    assert.equal(stepStatus(changed.stderr, 3), 'CACHED')
    assert.equal(stepStatus(changed.stderr, 4), 'CACHED')
    assert.equal(stepStatus(changed.stderr, 7), 'DONE', `the changed line reruns:\n${changed.stderr}`)
    const sbx = await t.create({ template: name })
    assert.equal((await sh(sbx, 'cat build-id.txt')).stdout, `built-${token}-changed\n`)
    await sbx.kill()
  })

  it('Template.exists / aliasExists and the template reads answer as E2B\'s API does', { timeout: TEST_TIMEOUT }, async () => {
    assert.equal(await Template.exists('base'), true)
    assert.equal(await Template.aliasExists('code-interpreter-v1'), true)
    assert.equal(await Template.exists(`no-such-${uniq()}`), false)
    const tags = await Template.getTags('base')
    assert.deepEqual(tags.map((t) => t.tag), ['default'])
    assert.ok(tags[0].buildId && !Number.isNaN(tags[0].createdAt.getTime()))
    // The reads the SDKs and E2B's OpenAPI define, as raw HTTP.
    const api = async (path) => {
      const res = await fetch(`${process.env.E2B_API_URL}${path}`, { headers: { 'X-API-Key': process.env.E2B_API_KEY } })
      return { status: res.status, body: await res.json() }
    }
    let r = await api('/templates/aliases/base')
    assert.equal(r.status, 200)
    assert.deepEqual(r.body, { templateID: 'base', public: false })
    r = await api(`/templates/aliases/no-such-${uniq()}`)
    assert.equal(r.status, 404)
    assert.equal(r.body.code, 404)
    const v1 = await api('/templates')
    const v2 = await api('/v2/templates')
    assert.equal(v2.status, 200)
    assert.deepEqual(v2.body.map((t) => t.templateID).sort(), v1.body.map((t) => t.templateID).sort())
    for (const t of v2.body) {
      for (const key of ['templateID', 'buildID', 'cpuCount', 'memoryMB', 'diskSizeMB', 'public', 'aliases', 'names', 'createdAt', 'updatedAt', 'createdBy', 'lastSpawnedAt', 'spawnCount', 'buildCount', 'envdVersion', 'buildStatus']) {
        assert.ok(key in t, `Template ${t.templateID} lacks ${key}`)
      }
    }
    r = await api('/templates/base')
    assert.equal(r.status, 200)
    assert.equal(r.body.templateID, 'base')
    assert.equal(r.body.builds.length, 1)
    assert.equal(r.body.builds[0].status, 'ready')
    assert.match(r.body.builds[0].buildID, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/)
    r = await api('/templates/base/tags')
    assert.equal(r.status, 200)
    assert.deepEqual(r.body.map((t) => t.tag), ['default'])
    assert.equal((await api(`/templates/no-such-${uniq()}`)).status, 404)
  })

  it('rejects bad Dockerfiles with the line and leaves no template behind', { timeout: TEST_TIMEOUT }, async () => {
    const bad = `e2e-bad-${uniq()}`
    const cases = [
      ['FROM base\nRUN true\nEXPOSE 80\n', /line 3: instruction EXPOSE is not supported/],
      ['FROM no-such-template-x\nRUN true\n', /line 1: FROM no-such-template-x: no such template/],
      ['FROM base\nRUN echo step-output-xyz && exit 3\n', /line 2 .*non-zero code: 3[\s\S]*step-output-xyz/]
    ]
    for (const [df, want] of cases) {
      writeFileSync(join(ctxDir, 'Dockerfile'), df)
      const r = await airlock(['template', 'build', '--name', bad, ctxDir])
      assert.notEqual(r.code, 0, `build of ${JSON.stringify(df)} must fail`)
      assert.match(r.stderr, want)
      const info = await airlock(['template', 'info', bad])
      assert.notEqual(info.code, 0, 'no half template is recorded')
      assert.match(info.stderr, /404|not found/)
    }
    await assert.rejects(Sandbox.create(bad, { timeoutMs: 60_000 }))
  })
})
