// Issue 28 part 2 on the microVM runtime (scripts/test-microvm.sh): the
// activity feed's process entries. On gVisor they come from runsc's runtime
// monitoring; in a microVM the agent reads the guest kernel's proc connector
// (internal/envd/procevents) and the daemon keeps one stream open per
// running sandbox (internal/activity ProcFollower). A background process
// that the sandbox's own code starts (a shell's `&`, not a command of the
// API) appears with the same shapes as on gVisor: process.start {pid, ppid,
// path, argv, uid, cwd} and process.exit {pid, argv, exitCode}; also after
// a pause and resume (the stream resumes after the last sequence number).
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { tracker, sh, waitUntil } from './helpers.mjs'

const T = 300_000

async function feed (id, query) {
  const res = await fetch(`${process.env.E2B_API_URL}/sandboxes/${id}/activity${query}`, {
    headers: { 'X-API-Key': process.env.E2B_API_KEY }
  })
  assert.equal(res.status, 200, `GET activity${query}: ${res.status}`)
  return res.json()
}

// processOf returns the start and exit entries of the process whose argv
// joined by spaces is want.
function processOf (entries, want) {
  let start, exit
  for (const e of entries) {
    if ((e.data?.argv ?? []).join(' ') !== want) continue
    if (e.type === 'process.start') start = e
    else if (e.type === 'process.exit' && start && e.data.pid === start.data.pid) exit = e
  }
  return { start, exit }
}

describe('microVM: process entries in the activity feed', { timeout: T * 3 }, () => {
  const t = tracker('microvm-activity')
  after(() => t.killAll())

  async function check (sbx, script, code) {
    const argv = `sh -c ${script}`
    await sh(sbx, `sh -c '${script}' &`)
    let found
    await waitUntil(async () => {
      found = processOf(await feed(sbx.sandboxId, '?types=process&limit=10000'), argv)
      return found.start && found.exit
    }, 60_000, 500)
    assert.ok(found.start && found.exit, `no process.start and process.exit for ${argv}`)
    const s = found.start
    assert.deepEqual(Object.keys(s.data).sort(), ['argv', 'cwd', 'path', 'pid', 'ppid', 'uid'])
    assert.equal(s.data.uid, 1000, 'started as the default user')
    assert.equal(s.data.cwd, '/home/user')
    assert.match(s.data.path, /\/(ba|da)?sh$/)
    assert.ok(s.data.ppid > 0 && s.data.pid > 0)
    assert.deepEqual(Object.keys(found.exit.data).sort(), ['argv', 'exitCode', 'pid'])
    assert.equal(found.exit.data.exitCode, code)
    assert.ok(found.exit.id > s.id, 'the exit comes after the start')
    return found
  }

  it('a background process started by sandbox code appears with its argv and exit code, also after a resume', { timeout: T * 2 }, async () => {
    const sbx = await t.create()
    const first = await check(sbx, 'sleep 1; exit 7', 7)
    // Its child `sleep 1` too (a process the sandbox started, not the API).
    const { start: sleepStart } = processOf(await feed(sbx.sandboxId, '?types=process&limit=10000'), 'sleep 1')
    assert.ok(sleepStart, 'the shell\'s child `sleep 1` has a process.start')
    assert.equal(sleepStart.data.ppid, first.start.data.pid)

    assert.equal(await sbx.betaPause(), true)
    const resumed = await Sandbox.connect(sbx.sandboxId)
    const second = await check(resumed, 'sleep 0.5; exit 3', 3)
    assert.ok(second.start.id > first.exit.id, 'ids keep growing across the resume')
    // No entry twice: the stream reopened after the last sequence number.
    const all = await feed(sbx.sandboxId, '?types=process&limit=10000')
    const starts = all.filter((e) => e.type === 'process.start' && e.data.pid === first.start.data.pid && e.data.argv.join(' ') === 'sh -c sleep 1; exit 7')
    assert.equal(starts.length, 1, 'the first process.start once')
  })
})
