// Security review (issue 23), H1 through the official SDK: Template.build
// with copy() file sets that hold symlinks. The SDK resolves a copy()
// source path on the client (its glob follows links on the way) and sends
// links inside a copied directory as links (resolveSymlinks: false), so the
// server must keep those as links, whatever their target, and never read a
// host file through one. (A link to a directory outside the project makes
// the SDK's own glob upload that directory's files under the link; the
// server refuses to write through a link leaving the context.) (A set whose link the *server* would follow out of
// the context cannot be produced by this client: the Go test
// TestReviewBuild/attack/H1-sdk-copy-symlink-out-of-set sends it raw.)
import { describe, it, after, before } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, mkdirSync, writeFileSync, rmSync, symlinkSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Template } from 'e2b'
import { tracker, uniq, sh, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('templates-review')
const ctxDir = mkdtempSync(join(tmpdir(), 'airlock-e2e-review-'))
const name = `e2e-review-${uniq()}`
const token = uniq()

before(() => {
  mkdirSync(join(ctxDir, 'app', 'sub'), { recursive: true })
  writeFileSync(join(ctxDir, 'app', 'a.txt'), `a ${token}\n`)
  writeFileSync(join(ctxDir, 'app', 'sub', 'f.txt'), `f ${token}\n`)
  symlinkSync('/etc/hostname', join(ctxDir, 'app', 'abs')) // absolute, out of the set
  symlinkSync('a.txt', join(ctxDir, 'app', 'rel')) // inside the set
  symlinkSync('sub', join(ctxDir, 'app', 'sublink')) // a directory inside the set
})

after(async () => {
  await t.killAll()
  await fetch(`${process.env.E2B_API_URL}/templates/${name}`, { method: 'DELETE', headers: { 'X-API-Key': process.env.E2B_API_KEY } }).catch(() => {})
  rmSync(ctxDir, { recursive: true, force: true })
})

describe('templates from code: copy() file sets with symlinks (security review H1)', { timeout: 600_000 }, () => {
  it('links in a copied directory stay links and read nothing of the host; a link on the way to a source resolves on the client (H1 regression)', { timeout: 600_000 }, async () => {
    const template = Template({ fileContextPath: ctxDir })
      .fromTemplate('base')
      .copy('app', '/srv/app', { user: 'root' })
      .copy('app/sublink/f.txt', '/srv/f.txt', { user: 'root' })
    await Template.build(template, name)
    const sbx = await t.create({ template: name })
    const r = await sh(sbx, 'cat /srv/app/rel /srv/f.txt; readlink /srv/app/abs; test -L /srv/app/sublink && echo sublink-is-link; cat /srv/app/abs', { user: 'root' })
    const hostHostname = readFileSync('/etc/hostname', 'utf8').trim()
    assert.equal(r.exitCode, 0, r.stderr)
    const lines = r.stdout.split('\n')
    assert.deepEqual(lines.slice(0, 4), [`a ${token}`, `f ${token}`, '/etc/hostname', 'sublink-is-link'])
    // /srv/app/abs reads the sandbox's own /etc/hostname, not the node's.
    const inSandbox = (await sh(sbx, 'cat /etc/hostname')).stdout.trim()
    assert.equal(lines[4], inSandbox)
    if (inSandbox !== hostHostname) assert.ok(!r.stdout.includes(hostHostname), 'the node\'s hostname reached the sandbox')
  })
})
