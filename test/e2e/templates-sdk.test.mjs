// Templates defined in code: the official SDK's Template builder and
// Template.build drive E2B's v3 build API (POST /v3/templates, file uploads,
// POST /v2/templates/{id}/builds/{build}, status polling with logs), which
// Airlock runs on its Dockerfile build engine. Then Sandbox.create('name:tag').
import { describe, it, after, before } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Sandbox, Template, waitForFile, waitForPort } from 'e2b'
import { tracker, uniq, sh, waitUntil, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('templates-sdk')
const ctxDir = mkdtempSync(join(tmpdir(), 'airlock-e2e-sdk-'))
const name = `e2e-sdk-${uniq()}`
const token = uniq()

/** The template under test; steps are numbered from 1 in the order written. */
function appTemplate () {
  return Template({ fileContextPath: ctxDir })
    .fromTemplate('base')
    .copy('app/', '/home/user/app/') // 1
    .runCmd('echo root-ran > /opt/marker', { user: 'root' }) // 2
    .setEnvs({ APP_MODE: 'sdk', GREETING: 'hello $HOME' }) // 3
    .setWorkdir('/home/user/app') // 4
    .runCmd(`echo built-${token} > build-id.txt`) // 5
    .setUser('user') // 6
    .setStartCmd('python3 -m http.server 8000', waitForPort(8000))
}

async function build (template, ref, opts = {}) {
  const logs = []
  const info = await Template.build(template, ref, { ...opts, onBuildLogs: (e) => logs.push(e.message) })
  return { info, logs: logs.join('\n') }
}

async function api (method, path, body) {
  const res = await fetch(process.env.E2B_API_URL + path, {
    method,
    headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body)
  })
  const text = await res.text()
  return { status: res.status, body: text ? JSON.parse(text) : undefined }
}

before(() => {
  mkdirSync(join(ctxDir, 'app', 'static'), { recursive: true })
  writeFileSync(join(ctxDir, 'app', 'index.html'), `<h1>sdk ${token}</h1>\n`)
  writeFileSync(join(ctxDir, 'app', 'static', 'data.txt'), 'nested file\n')
})

after(async () => {
  await t.killAll()
  await api('DELETE', '/templates/tags', { name, tags: ['stable', 'v1'] }).catch(() => {})
  await api('DELETE', `/templates/${name}-helpers`).catch(() => {})
  rmSync(ctxDir, { recursive: true, force: true })
})

describe('templates from code (SDK Template.build)', { timeout: 900_000 }, () => {
  let first

  it('builds name:v1 with extra tags, reporting each step in onBuildLogs', { timeout: 600_000 }, async () => {
    first = await build(appTemplate(), `${name}:v1`, { tags: ['stable'], cpuCount: 1, memoryMB: 768 })
    assert.equal(first.info.templateId, name)
    assert.deepEqual([...first.info.tags].sort(), ['stable', 'v1'])
    for (const want of ['COPY app/ /home/user/app/', 'RUN echo root-ran', 'ENV APP_MODE', 'WORKDIR /home/user/app', 'USER user']) {
      assert.ok(first.logs.includes(want), `log mentions ${want}:\n${first.logs}`)
    }
    assert.match(first.logs, /\[2\/6\] RUN echo root-ran > \/opt\/marker \(as root\)/)
    assert.match(first.logs, /built \(tags v1, stable\)/)
  })

  it('exists (per tag) and lists its tags', async () => {
    assert.equal(await Template.exists(name), true)
    assert.equal(await Template.exists(`${name}:v1`), true)
    assert.equal(await Template.exists(`${name}:stable`), true)
    assert.equal(await Template.exists(`${name}:nope`), false)
    assert.equal(await Template.exists(`${name}:default`), false, 'no default tag was built')
    assert.equal(await Template.exists(`${name}-missing`), false)
    const tags = (await Template.getTags(name)).map((x) => x.tag).sort()
    assert.deepEqual(tags, ['stable', 'v1'])
  })

  it('GET /templates lists the template once, with its tags', async () => {
    const list = await api('GET', '/templates')
    assert.equal(list.status, 200)
    const mine = list.body.filter((x) => x.templateID === name || x.templateID.startsWith(`${name}:`))
    assert.equal(mine.length, 1, JSON.stringify(mine))
    assert.deepEqual(mine[0].names, [name])
    assert.deepEqual(mine[0].aliases, [name])
    assert.deepEqual(mine[0].tags, ['stable', 'v1'])
    assert.equal(mine[0].buildStatus, 'ready')
    assert.ok(!list.body.some((x) => x.templateID.includes(':')), 'no name:tag entries')
  })

  it('Sandbox.create(name:tag) has the files, env, user, workdir and the running server', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create({ template: `${name}:v1` })
    const who = await sh(sbx, 'id -un; pwd; echo "$APP_MODE|$GREETING"')
    assert.equal(who.exitCode, 0, who.stderr)
    assert.deepEqual(who.stdout.trim().split('\n'), ['user', '/home/user/app', 'sdk|hello $HOME'])
    const files = await sh(sbx, 'cat index.html static/data.txt build-id.txt; stat -c %U /opt/marker index.html; cat /opt/marker')
    assert.equal(files.exitCode, 0, files.stderr)
    assert.deepEqual(files.stdout.trim().split('\n'), [`<h1>sdk ${token}</h1>`, 'nested file', `built-${token}`, 'root', 'user', 'root-ran'])
    const page = await sh(sbx, 'curl -sf http://127.0.0.1:8000/index.html')
    assert.equal(page.exitCode, 0, page.stderr)
    assert.equal(page.stdout.trim(), `<h1>sdk ${token}</h1>`)
  })

  it('a rebuild of the same steps is served from the cache, and skipCache rebuilds', { timeout: 600_000 }, async () => {
    const again = await build(appTemplate(), `${name}:v1`)
    assert.match(again.logs, /CACHED COPY app\//)
    assert.match(again.logs, /CACHED RUN echo built-/)
    assert.match(again.logs, /Skipping upload of 'app\/', already cached/)
    const forced = await build(appTemplate(), `${name}:v1`, { skipCache: true })
    assert.doesNotMatch(forced.logs, /CACHED/)
  })

  it('the builder helpers: aptInstall, makeDir, gitClone, makeSymlink, rename, remove, copy with mode and user, waitForFile', { timeout: 600_000 }, async () => {
    const git = 'git -c user.email=e2e@airlock.test -c user.name=e2e'
    const helpers = Template({ fileContextPath: ctxDir })
      .fromTemplate('base')
      .aptInstall(['git', 'cowsay'], { noInstallRecommends: true })
      .makeDir(['/opt/h/data', '/opt/h/logs'], { mode: 0o750, user: 'root' })
      .runCmd(`git init -q -b main /tmp/src && cd /tmp/src && echo cloned-${token} > f.txt && ${git} add f.txt && ${git} commit -qm one`, { user: 'root' })
      .gitClone('file:///tmp/src', '/opt/h/repo', { branch: 'main', depth: 1, user: 'root' })
      .makeSymlink('/opt/h/repo/f.txt', '/opt/h/link.txt', { user: 'root' })
      .runCmd('echo old > /opt/h/old.txt && echo gone > /opt/h/gone.txt', { user: 'root' })
      .rename('/opt/h/old.txt', '/opt/h/new.txt', { user: 'root' })
      .remove(['/opt/h/gone.txt', '/tmp/src'], { recursive: true, force: true, user: 'root' })
      .copy('app/index.html', '/opt/h/index.html', { mode: 0o640, user: 'user' })
      .setStartCmd('sleep 1 && touch /tmp/started && sleep infinity', waitForFile('/tmp/started'))
    await build(helpers, `${name}-helpers`)
    const sbx = await t.create({ template: `${name}-helpers` })
    const out = await sh(sbx, [
      '/usr/games/cowsay moo >/dev/null && echo cowsay-ok',
      'stat -c "%a %U" /opt/h/data /opt/h/logs',
      'cat /opt/h/link.txt',
      'readlink /opt/h/link.txt',
      "git -c safe.directory='*' -C /opt/h/repo rev-list --count HEAD",
      'cat /opt/h/new.txt',
      'ls /opt/h/old.txt /opt/h/gone.txt /tmp/src 2>&1 | grep -c "No such file"',
      'stat -c "%a %U" /opt/h/index.html',
      'test -f /tmp/started && echo started'
    ].join('; '))
    assert.equal(out.exitCode, 0, out.stderr)
    assert.deepEqual(out.stdout.trim().split('\n'), [
      'cowsay-ok', '750 root', '750 root', `cloned-${token}`, '/opt/h/repo/f.txt', '1', 'old', '3', '640 user', 'started'
    ])
  })

  it('a failing step fails the build naming the step and its output', { timeout: 600_000 }, async () => {
    const bad = Template({ fileContextPath: ctxDir })
      .fromTemplate('base')
      .setEnvs({ X: '1' }) // 1
      .runCmd('echo about-to-fail; exit 3') // 2
    const logs = []
    await assert.rejects(
      Template.build(bad, `${name}-bad`, { onBuildLogs: (e) => logs.push(e.message) }),
      (err) => {
        assert.equal(err.name, 'BuildError')
        assert.match(err.message, /step 2 \(RUN echo about-to-fail; exit 3\)/)
        assert.match(err.message, /non-zero code: 3/)
        return true
      })
    assert.ok(logs.some((l) => l.includes('about-to-fail')), logs.join('\n'))
    assert.equal(await Template.exists(`${name}-bad`), false)
  })

  it('buildInBackground + getBuildStatus report the build until it is ready', { timeout: 600_000 }, async () => {
    const data = await Template.buildInBackground(appTemplate(), `${name}:bg`)
    let seen = 0
    const status = await waitUntil(async () => {
      const s = await Template.getBuildStatus(data, { logsOffset: seen })
      seen += s.logEntries.length
      return s.status === 'ready' || s.status === 'error' ? s : undefined
    }, 300_000, 300)
    assert.equal(status?.status, 'ready', JSON.stringify(status?.reason))
    assert.ok(seen > 5, `saw ${seen} log entries`)
    const full = await api('GET', `/templates/${name}/builds/${data.buildId}/logs?limit=1000`)
    assert.equal(full.status, 200)
    assert.equal(full.body.logs.length, seen)
    await Template.removeTags(name, 'bg')
  })

  it('assigns and removes tags; a template with tags is not deleted', { timeout: TEST_TIMEOUT }, async () => {
    const res = await Template.assignTags(`${name}:v1`, ['prod'])
    assert.deepEqual(res.tags, ['prod'])
    let tags = await Template.getTags(name)
    assert.deepEqual(tags.map((x) => x.tag).sort(), ['prod', 'stable', 'v1'])
    const v1 = tags.find((x) => x.tag === 'v1')
    assert.equal(tags.find((x) => x.tag === 'prod').buildId, v1.buildId)
    const sbx = await t.create({ template: `${name}:prod` })
    assert.equal((await sh(sbx, 'cat build-id.txt')).stdout.trim(), `built-${token}`)
    // In use by a sandbox: refused.
    await assert.rejects(Template.removeTags(name, 'prod'), /in use/)
    await Sandbox.kill(sbx.sandboxId)
    await Template.removeTags(name, 'prod')
    tags = await Template.getTags(name)
    assert.deepEqual(tags.map((x) => x.tag).sort(), ['stable', 'v1'])
    // Deleting name:default while name:v1 and name:stable exist is refused.
    await Template.assignTags(`${name}:v1`, 'default')
    const del = await api('DELETE', `/templates/${name}`)
    assert.equal(del.status, 409)
    assert.match(del.body.message, /still has tags stable, v1/)
    await Template.removeTags(name, 'default')
  })
})
