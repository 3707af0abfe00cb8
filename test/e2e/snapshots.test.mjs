// Pause/resume with memory through the official SDKs: processes, files and
// interpreter variables survive a pause; pause twice is a 409 (false);
// lifecycle onTimeout "pause"; a paused sandbox without autoResume is not
// reachable through the proxy, one with autoResume wakes up on traffic.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'
import { tracker, sh, uniq, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('snapshots')
const forks = [] // children created by fork or from snapshots (not known to the tracker)
after(() => Promise.allSettled([t.killAll(), ...forks.map((id) => Sandbox.kill(id))]))

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

describe('pause and resume', () => {
  it('keeps files and running processes across pause/connect', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create()
    await sbx.files.write('/home/user/before.txt', 'written before pause')
    // A background counter: still counting after the resume means the
    // process itself survived (not restarted). Written with a rename so a
    // read never sees the file truncated half-way through an update.
    await sbx.commands.run('i=0; while true; do i=$((i+1)); echo $i > /tmp/counter.new; mv /tmp/counter.new /tmp/counter; sleep 0.1; done',
      { background: true })
    await sleep(500)
    const before = Number((await sbx.files.read('/tmp/counter')).trim())
    assert.ok(before > 0, `counter should run before the pause, got ${before}`)

    assert.equal(await sbx.betaPause(), true, 'first pause succeeds')
    assert.equal(await Sandbox.betaPause(sbx.sandboxId), false, 'second pause reports "already paused"')
    const info = await Sandbox.getInfo(sbx.sandboxId)
    assert.equal(info.state, 'paused')
    const paused = await Sandbox.list({ query: { metadata: t.metadata, state: ['paused'] } }).nextItems()
    assert.ok(paused.some((s) => s.sandboxId === sbx.sandboxId), 'listed as paused')

    const resumed = await Sandbox.connect(sbx.sandboxId)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running')
    assert.equal(await resumed.files.read('/home/user/before.txt'), 'written before pause')
    const atResume = Number((await resumed.files.read('/tmp/counter')).trim())
    assert.ok(atResume >= before, `counter kept its value (${before} → ${atResume})`)
    await sleep(600)
    const later = Number((await resumed.files.read('/tmp/counter')).trim())
    assert.ok(later > atResume, `background process still running after resume (${atResume} → ${later})`)
    // Commands and the network work after the resume.
    const r = await sh(resumed, 'echo ok && ip -4 addr show eth0 | grep -c inet')
    assert.equal(r.exitCode, 0, r.stderr)
    assert.match(r.stdout, /^ok\n1\n$/)
    // A second pause/resume cycle works too.
    assert.equal(await resumed.betaPause(), true)
    const again = await Sandbox.connect(sbx.sandboxId)
    assert.equal(await again.files.read('/home/user/before.txt'), 'written before pause')
    assert.equal(await again.kill(), true)
    assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'killed paused-then-resumed sandbox is gone')
  })

  it('kill removes a paused sandbox', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create()
    assert.equal(await sbx.betaPause(), true)
    assert.equal(await Sandbox.kill(sbx.sandboxId), true)
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId), /doesn't exist|not found/i)
  })

  it('pausing an unknown sandbox is a not-found error', { timeout: TEST_TIMEOUT }, async () => {
    await assert.rejects(Sandbox.betaPause('i0000000000000000nope'), (err) => /not found|doesn't exist/i.test(String(err)))
  })

  it('a paused sandbox without autoResume is not reachable through the proxy', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create()
    assert.equal(await sbx.betaPause(), true)
    await assert.rejects(sbx.commands.run('true', { requestTimeoutMs: 10_000 }))
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused', 'traffic did not resume it')
    await Sandbox.kill(sbx.sandboxId)
  })

  it('onTimeout pause: the timeout pauses instead of killing; autoResume wakes it on traffic', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create({ timeoutMs: 3_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
    await sbx.files.write('/home/user/keep.txt', 'kept')
    const info = await Sandbox.getInfo(sbx.sandboxId)
    assert.equal(info.lifecycle?.onTimeout, 'pause')
    assert.equal(info.lifecycle?.autoResume, true)
    await sleep(5_000)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused', 'paused at 5 s')
    // Traffic through the proxy resumes it.
    assert.equal(await sbx.files.read('/home/user/keep.txt'), 'kept')
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running')
    await Sandbox.kill(sbx.sandboxId)
  })
})

describe('pause and resume with the code interpreter', () => {
  it('Python variables survive a pause', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await CodeSandbox.create({ timeoutMs: 300_000, metadata: t.metadata })
    try {
      const set = await sbx.runCode('x = 41\nx')
      assert.equal(set.error, undefined)
      assert.equal(set.text, '41')
      assert.equal(await sbx.betaPause(), true)
      assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
      const resumed = await CodeSandbox.connect(sbx.sandboxId)
      const r = await resumed.runCode('x + 1')
      assert.equal(r.error, undefined, r.error?.value)
      assert.equal(r.text, '42')
    } finally {
      await Sandbox.kill(sbx.sandboxId)
    }
  })
})

// A loopback echo server and a client holding one connection open across
// the checkpoint. runsc 20221219 could not save such sockets (pause and fork
// answered 409 "open TCP sockets"); the pinned runsc saves listening and
// loopback endpoints.
const ECHO_SERVER = `python3 -c '
import socket, threading
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 8765)); srv.listen(16)
def echo(c):
    while True:
        d = c.recv(64)
        if not d: break
        c.sendall(d)
while True:
    c, _ = srv.accept(); threading.Thread(target=echo, args=(c,), daemon=True).start()
'`
// The client sends "one", waits for /tmp/go, sends "two"; it writes what came back.
const ECHO_CLIENT = `python3 -c '
import socket, os, time
c = socket.create_connection(("127.0.0.1", 8765)); c.sendall(b"one"); r1 = c.recv(64)
open("/tmp/client1", "w").write(r1.decode())
while not os.path.exists("/tmp/go"): time.sleep(0.05)
c.sendall(b"two"); open("/tmp/client2", "w").write(c.recv(64).decode())
'`
const NEW_CONN = `python3 -c 'import socket; c = socket.create_connection(("127.0.0.1", 8765), timeout=5); c.sendall(b"new"); print(c.recv(64).decode())'`

describe('checkpoints with open TCP sockets', () => {
  it('a listening server and an open loopback connection survive pause/resume and fork', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create()
    await sbx.commands.run(ECHO_SERVER, { background: true })
    for (let i = 0; i < 100 && (await sh(sbx, NEW_CONN)).exitCode !== 0; i++) await sleep(100)
    await sbx.commands.run(ECHO_CLIENT, { background: true })
    for (let i = 0; i < 100 && (await sh(sbx, 'cat /tmp/client1 2>/dev/null')).stdout !== 'one'; i++) await sleep(100)
    assert.equal((await sh(sbx, 'cat /tmp/client1')).stdout, 'one')
    const bootID = (await sh(sbx, 'cat /proc/sys/kernel/random/boot_id')).stdout.trim()
    assert.match(bootID, /^[0-9a-f-]{36}$/, 'boot_id exists')

    assert.equal(await sbx.betaPause(), true, 'pause with a server and an open connection succeeds')
    const resumed = await Sandbox.connect(sbx.sandboxId)
    assert.equal((await sh(resumed, NEW_CONN)).stdout, 'new\n', 'the server accepts new connections after the resume')
    await resumed.files.write('/tmp/go', '')
    for (let i = 0; i < 100 && (await sh(resumed, 'cat /tmp/client2 2>/dev/null')).stdout !== 'two'; i++) await sleep(100)
    assert.equal((await sh(resumed, 'cat /tmp/client2')).stdout, 'two', 'the connection opened before the pause still works')
    assert.equal((await sh(resumed, 'cat /proc/sys/kernel/random/boot_id')).stdout.trim(), bootID, 'boot_id is kept by a resume')
    const fresh = await t.create()
    assert.notEqual((await sh(fresh, 'cat /proc/sys/kernel/random/boot_id')).stdout.trim(), bootID, 'a fresh boot has its own boot_id')

    const kids = await Sandbox.fork(sbx.sandboxId, { count: 2 })
    for (const k of kids) if (!(k instanceof Error)) forks.push(k.sandboxId)
    for (const k of kids) assert.ok(!(k instanceof Error), `fork with open sockets failed: ${k}`)
    for (const k of kids) {
      assert.equal((await sh(k, NEW_CONN)).stdout, 'new\n', 'the server runs in the fork child')
    }
    assert.equal((await sh(resumed, NEW_CONN)).stdout, 'new\n', 'and in the parent after the fork')
    await Promise.allSettled([...kids.map((k) => k.kill()), fresh.kill(), resumed.kill()])
  })
})

describe('fork', () => {
  it('children see the parent state, get their own identity and address, and are isolated', { timeout: TEST_TIMEOUT }, async () => {
    const parent = await t.create()
    await parent.files.write('/home/user/state.txt', 'from parent')
    const parentIP = (await sh(parent, "ip -4 -o addr show eth0 | awk '{print $4}'")).stdout.trim()
    const kids = await Sandbox.fork(parent.sandboxId, { count: 4 })
    for (const k of kids) if (!(k instanceof Error)) forks.push(k.sandboxId)
    assert.equal(kids.length, 4)
    for (const k of kids) assert.ok(!(k instanceof Error), `fork failed: ${k}`)
    const ids = new Set([parent.sandboxId, ...kids.map((k) => k.sandboxId)])
    assert.equal(ids.size, 5, 'every child has its own id')
    const ips = new Set([parentIP])
    for (const [i, k] of kids.entries()) {
      assert.equal(await k.files.read('/home/user/state.txt'), 'from parent')
      const r = await sh(k, "echo $E2B_SANDBOX_ID; ip -4 -o addr show eth0 | awk '{print $4}'")
      assert.equal(r.exitCode, 0, r.stderr)
      const [envID, ip] = r.stdout.trim().split('\n')
      assert.equal(envID, k.sandboxId, 'E2B_SANDBOX_ID is the child id')
      ips.add(ip)
      await k.files.write('/home/user/state.txt', `from child ${i}`)
    }
    assert.equal(ips.size, 5, `every sandbox has its own address: ${[...ips]}`)
    // Writes in one child are invisible to the parent and the siblings.
    assert.equal(await parent.files.read('/home/user/state.txt'), 'from parent')
    for (const [i, k] of kids.entries()) {
      assert.equal(await k.files.read('/home/user/state.txt'), `from child ${i}`)
    }
    // The parent keeps running with its own token; a child rejects it.
    assert.equal((await sh(parent, 'echo alive')).stdout, 'alive\n')
    const resp = await fetch(`${process.env.E2B_SANDBOX_URL}/envs`, {
      headers: { 'E2b-Sandbox-Id': kids[0].sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': parent.envdAccessToken ?? 'x' }
    })
    assert.equal(resp.status, 401, 'the parent token does not open a child')
    await Promise.allSettled(kids.map((k) => k.kill()))
  })

  it('fork accepts up to 100 children and answers per child when the host cannot hold them all', { timeout: TEST_TIMEOUT * 2 }, async () => {
    // A parent with 8 GiB (an Airlock create key, raw HTTP): this host holds
    // only a few such children, so some of four get an error entry.
    const res = await fetch(`${process.env.E2B_API_URL}/v2/sandboxes`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-API-Key': process.env.E2B_API_KEY },
      body: JSON.stringify({ templateID: 'base', timeout: 300, memoryMB: 8192, metadata: t.metadata })
    })
    assert.equal(res.status, 201, await res.clone().text())
    const parentId = (await res.json()).sandboxID
    forks.push(parentId)
    await assert.rejects(Sandbox.fork(parentId, { count: 101 }), /count must be between 1 and 100/)
    const kids = await Sandbox.fork(parentId, { count: 4 })
    assert.equal(kids.length, 4)
    for (const k of kids) if (!(k instanceof Error)) forks.push(k.sandboxId)
    const failed = kids.filter((k) => k instanceof Error)
    const started = kids.filter((k) => !(k instanceof Error))
    assert.ok(failed.length >= 1, 'every 8 GiB child fit on this host?')
    for (const e of failed) assert.match(e.message, /not enough host memory for fork child/)
    // The children that fit come first and run.
    assert.deepEqual(kids.map((k) => k instanceof Error), [...started.map(() => false), ...failed.map(() => true)])
    for (const k of started) assert.equal((await k.commands.run('echo ok')).stdout, 'ok\n')
    await Promise.allSettled(started.map((k) => k.kill()))
  })

  it('forking an unknown or paused sandbox fails', { timeout: TEST_TIMEOUT }, async () => {
    await assert.rejects(Sandbox.fork('i0000000000000000nope', { count: 1 }))
    const sbx = await t.create()
    assert.equal(await sbx.betaPause(), true)
    await assert.rejects(Sandbox.fork(sbx.sandboxId, { count: 1 }), /paused/)
  })

  it('interpreter state is copied into forks and diverges afterwards', { timeout: TEST_TIMEOUT }, async () => {
    const parent = await CodeSandbox.create({ timeoutMs: 300_000, metadata: t.metadata })
    try {
      assert.equal((await parent.runCode('x = 41\nx')).text, '41')
      const kids = await CodeSandbox.fork(parent.sandboxId, { count: 2 })
      for (const k of kids) if (!(k instanceof Error)) forks.push(k.sandboxId)
      for (const k of kids) assert.ok(!(k instanceof Error), `fork failed: ${k}`)
      try {
        assert.equal((await kids[0].runCode('x + 1')).text, '42')
        assert.equal((await kids[0].runCode('x = 100\nx')).text, '100')
        assert.equal((await kids[1].runCode('x')).text, '41', 'a sibling does not see the change')
        assert.equal((await parent.runCode('x')).text, '41', 'the parent does not see the change')
      } finally {
        await Promise.allSettled(kids.map((k) => Sandbox.kill(k.sandboxId)))
      }
    } finally {
      await Sandbox.kill(parent.sandboxId)
    }
  })
})

describe('named snapshots', () => {
  it('a snapshot with x = 41 and a file starts isolated sandboxes with fresh identities', { timeout: TEST_TIMEOUT }, async () => {
    const src = await CodeSandbox.create({ timeoutMs: 300_000, metadata: t.metadata })
    forks.push(src.sandboxId)
    assert.equal((await src.runCode('x = 41\nx')).text, '41')
    await src.files.write('/home/user/snap.txt', 'snapped')
    const name = `snap-${uniq()}`
    const snap = await src.createSnapshot({ name })
    assert.ok(snap.snapshotId, 'snapshot id')
    assert.deepEqual(snap.names, [name])

    // The source keeps running with its state.
    assert.equal((await src.runCode('x')).text, '41')
    assert.equal((await Sandbox.getInfo(src.sandboxId)).state, 'running')

    // Listed (by source sandbox and by name) and shown as a template.
    const bySource = await Sandbox.listSnapshots({ sandboxId: src.sandboxId }).nextItems()
    assert.deepEqual(bySource.map((s) => s.snapshotId), [snap.snapshotId])
    const byName = await Sandbox.listSnapshots({ name }).nextItems()
    assert.deepEqual(byName.map((s) => s.snapshotId), [snap.snapshotId])

    // Two sandboxes from it, by id and by name.
    const a = await CodeSandbox.create(snap.snapshotId, { timeoutMs: 120_000, metadata: t.metadata })
    forks.push(a.sandboxId)
    const b = await CodeSandbox.create(name, { timeoutMs: 120_000, metadata: t.metadata, envs: { FROM_REQ: 'yes' } })
    forks.push(b.sandboxId)
    assert.equal(new Set([src.sandboxId, a.sandboxId, b.sandboxId]).size, 3)
    for (const s of [a, b]) {
      const r = await s.runCode('x + 1')
      assert.equal(r.error, undefined, r.error?.value)
      assert.equal(r.text, '42')
      assert.equal(await s.files.read('/home/user/snap.txt'), 'snapped')
      const env = await sh(s, 'echo $E2B_SANDBOX_ID')
      assert.equal(env.stdout.trim(), s.sandboxId, 'E2B_SANDBOX_ID is the new sandbox id')
      assert.equal((await s.runCode('import os; os.environ["E2B_SANDBOX_ID"]')).text, s.sandboxId, 'the warm kernel sees the new id')
    }
    assert.equal((await sh(b, 'echo $FROM_REQ')).stdout.trim(), 'yes', 'request env vars apply')
    // Python's random state was reseeded in each copy.
    const ra = (await a.runCode('import random; random.random()')).text
    const rb = (await b.runCode('import random; random.random()')).text
    const rs = (await src.runCode('import random; random.random()')).text
    assert.ok(ra && rb && rs, `random values: ${ra} ${rb} ${rs}`)
    assert.equal(new Set([ra, rb, rs]).size, 3, `random.random() differs: ${ra} ${rb} ${rs}`)

    // Changes are isolated.
    assert.equal((await a.runCode('x = 7\nx')).text, '7')
    await a.files.write('/home/user/snap.txt', 'changed in a')
    assert.equal((await b.runCode('x')).text, '41')
    assert.equal(await b.files.read('/home/user/snap.txt'), 'snapped')
    assert.equal((await src.runCode('x')).text, '41')
    assert.equal(await src.files.read('/home/user/snap.txt'), 'snapped')

    // Delete: true, then false; creating from it fails; existing sandboxes live on.
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
    assert.deepEqual(await Sandbox.listSnapshots({ sandboxId: src.sandboxId }).nextItems(), [])
    await assert.rejects(Sandbox.create(name, { timeoutMs: 30_000 }), /not found/i)
    assert.equal((await b.runCode('x')).text, '41')
    await Promise.allSettled([a, b, src].map((s) => Sandbox.kill(s.sandboxId)))
  })

  it('snapshot bad input: unknown or paused sandbox, unknown snapshot', { timeout: TEST_TIMEOUT }, async () => {
    await assert.rejects(Sandbox.createSnapshot('i0000000000000000nope'), (err) => err.name === 'SandboxNotFoundError' || /not found/i.test(String(err)))
    assert.equal(await Sandbox.deleteSnapshot(`snope${uniq()}`), false)
    const sbx = await t.create()
    assert.equal(await sbx.betaPause(), true)
    await assert.rejects(Sandbox.createSnapshot(sbx.sandboxId), /paused/)
    await Sandbox.kill(sbx.sandboxId)
  })
})

describe('creates served from the boot snapshot', () => {
  it('interpreter sandboxes get correct results, their own ids and their own random state', { timeout: TEST_TIMEOUT }, async () => {
    // With --boot-snapshots (the default) these restore the template's
    // boot snapshot once it is ready (else they cold-boot): either way the
    // behaviour must be the same.
    const boxes = await Promise.all([0, 1].map(() => CodeSandbox.create({ timeoutMs: 120_000, metadata: t.metadata })))
    for (const b of boxes) forks.push(b.sandboxId)
    try {
      const seen = new Set()
      const randoms = new Set()
      for (const b of boxes) {
        const r = await b.runCode('import os, random\nprint(os.environ["E2B_SANDBOX_ID"])\n(random.random(), 6 * 7)')
        assert.equal(r.error, undefined, r.error?.value)
        assert.equal(r.logs.stdout.join('').trim(), b.sandboxId, 'E2B_SANDBOX_ID in the kernel is this sandbox')
        const [rnd, answer] = r.text.replace(/[()]/g, '').split(',').map((x) => x.trim())
        assert.equal(answer, '42')
        seen.add((await sh(b, 'echo $E2B_SANDBOX_ID')).stdout.trim())
        randoms.add(rnd)
        assert.equal((await b.runCode('x = 1\nx + 1')).text, '2')
      }
      assert.equal(seen.size, 2, `distinct E2B_SANDBOX_IDs: ${[...seen]}`)
      assert.equal(randoms.size, 2, `distinct random.random(): ${[...randoms]}`)
    } finally {
      await Promise.allSettled(boxes.map((b) => b.kill()))
    }
  })
})
