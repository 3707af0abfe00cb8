// Volumes on the microVM runtime (issue 27; scripts/test-microvm.sh runs it
// against a daemon started with --runtime microvm): each VM mounts its
// volumes over NFSv3 from its own server on the host side of its veth
// (internal/volume/nfs). Two VMs see each other's writes at once, a mount
// survives pause/resume and a fork, a full volume gives ENOSPC, nothing
// leads out of the volume, and no other sandbox reaches a VM's server.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'

process.env.E2B_VOLUME_API_URL ??= process.env.E2B_API_URL

const { Sandbox, Volume } = await import('e2b')
const { tracker, uniq, sh } = await import('./helpers.mjs')

const T = 300_000
const t = tracker('microvm-volumes')
const extra = []
const made = []
after(async () => {
  await Promise.allSettled([t.killAll(), ...extra.map((id) => Sandbox.kill(id))])
  await Promise.allSettled(made.map((id) => Volume.destroy(id)))
})

async function newVolume (sizeMB) {
  const name = `vmvol-${uniq()}`
  if (!sizeMB) {
    const v = await Volume.create(name)
    made.push(v.volumeId)
    return v
  }
  const res = await fetch(`${process.env.E2B_API_URL}/volumes`, {
    method: 'POST',
    headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
    body: JSON.stringify({ name, sizeMB })
  })
  assert.equal(res.status, 201, await res.clone().text())
  const body = await res.json()
  made.push(body.volumeID)
  return await Volume.connect(body.volumeID)
}

async function ok (sbx, cmd, opts) {
  const r = await sh(sbx, cmd, opts)
  assert.equal(r.exitCode, 0, `${cmd}: ${r.stderr}${r.stdout}`)
  return r.stdout
}

const addr = "ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1"
const gatewayOf = (ip) => ip.replace(/\.(\d+)$/, (_, n) => '.' + (Number(n) - 1))
// A TCP connect from inside a sandbox: "open" or "closed" (a dropped SYN
// waits out the timeout: short where "closed" is expected).
const probe = (host, port, secs = 3) => `timeout ${secs} bash -c 'exec 3<>/dev/tcp/${host}/${port}' 2>/dev/null && echo open || echo closed`

describe('volumes on microVMs', { timeout: T * 6 }, () => {
  it('two VMs share a volume and see each other\'s writes at once; the content API sees them too', { timeout: T }, async () => {
    const v = await newVolume()
    await v.writeFile('/from-api.txt', 'via the content API')
    const [a, b] = await Promise.all([
      t.create({ volumeMounts: { '/mnt/shared': v } }),
      t.create({ volumeMounts: { '/home/user/vol': v.name } })
    ])
    assert.match(await ok(a, 'grep " /mnt/shared " /proc/mounts'), /nfs .*vers=3/)
    assert.equal(await ok(a, 'cat /mnt/shared/from-api.txt'), 'via the content API')
    // The default user writes; what it creates belongs to uid 1000.
    assert.equal(await ok(a, 'whoami; echo -n one > /mnt/shared/a.txt; stat -c %u:%g /mnt/shared/a.txt'), 'user\n1000:1000\n')
    assert.equal(await ok(b, 'cat /home/user/vol/a.txt'), 'one')
    await ok(b, 'echo -n two > /home/user/vol/a.txt; mkdir -p /home/user/vol/d/e; echo -n deep > /home/user/vol/d/e/f')
    assert.equal(await ok(a, 'cat /mnt/shared/a.txt; cat /mnt/shared/d/e/f'), 'twodeep')
    assert.equal(await v.readFile('/a.txt'), 'two')
    // A rename and a removal in one VM show in the other at once.
    await ok(a, 'mv /mnt/shared/a.txt /mnt/shared/b.txt && rm -r /mnt/shared/d')
    assert.equal(await ok(b, 'ls /home/user/vol | sort | tr "\\n" " "'), 'b.txt from-api.txt ')
    // A larger file goes through intact.
    await ok(a, 'head -c 3000000 /dev/urandom > /tmp/big && cp /tmp/big /mnt/shared/big && md5sum < /tmp/big > /tmp/sum')
    const sum = await ok(a, 'cat /tmp/sum')
    assert.equal(await ok(b, 'md5sum < /home/user/vol/big'), sum)
  })

  it('a full volume gives its writer ENOSPC', { timeout: T }, async () => {
    const v = await newVolume(16)
    const s = await t.create({ volumeMounts: { '/mnt/small': v } })
    const r = await sh(s, 'dd if=/dev/zero of=/mnt/small/fill bs=1M count=64 conv=fsync')
    assert.notEqual(r.exitCode, 0)
    assert.match(r.stderr, /No space left on device/)
    // The sandbox and the volume go on: delete and write again.
    assert.equal(await ok(s, 'rm /mnt/small/fill && echo -n again > /mnt/small/x && cat /mnt/small/x'), 'again')
  })

  it('nothing leads out of the volume: .., symlinks and hard links stay in the guest or fail', { timeout: T }, async () => {
    const v = await newVolume()
    const s = await t.create({ volumeMounts: { '/mnt/v': v } })
    // `..` at the mount's root is the guest's /mnt, never the host.
    assert.equal(await ok(s, 'cd /mnt/v/.. && pwd && ls /mnt/v/../../etc/hostname'), '/mnt\n/mnt/v/../../etc/hostname\n')
    assert.equal(await ok(s, 'cat /mnt/v/../../etc/hostname'), await ok(s, 'cat /etc/hostname'))
    // Symbolic links are text the guest resolves in its own tree.
    await ok(s, 'ln -s / /mnt/v/root && ln -s ../../../../../etc/passwd /mnt/v/up && echo -n guest-only > /tmp/marker')
    assert.equal(await ok(s, 'cat /mnt/v/root/tmp/marker'), 'guest-only')
    // The host side never follows them out: the content API refuses.
    await assert.rejects(v.readFile('/root/etc/hostname'))
    await assert.rejects(v.readFile('/up'))
    // A hard link across file systems fails in the guest.
    const hl = await sh(s, 'ln /etc/hostname /mnt/v/hl')
    assert.notEqual(hl.exitCode, 0)
    assert.equal(await ok(s, 'ls /mnt/v | sort | tr "\\n" " "'), 'root up ')
  })

  it('a mount survives pause/resume: read and write after the resume', { timeout: T }, async () => {
    const v = await newVolume()
    const s = await t.create({ volumeMounts: { '/mnt/v': v } })
    await ok(s, 'echo -n before > /mnt/v/p.txt')
    assert.equal(await s.betaPause(), true)
    await v.writeFile('/while-paused.txt', 'host wrote while paused')
    const r = await Sandbox.connect(s.sandboxId)
    assert.equal(await ok(r, 'cat /mnt/v/p.txt; echo; cat /mnt/v/while-paused.txt', { timeoutMs: 120_000 }), 'before\nhost wrote while paused')
    await ok(r, 'echo -n after > /mnt/v/q.txt')
    assert.equal(await v.readFile('/q.txt'), 'after')
  })

  it('a fork child mounts the same volume: it reads and writes, the parent sees it', { timeout: T }, async () => {
    const v = await newVolume()
    const parent = await t.create({ volumeMounts: { '/mnt/v': v } })
    await ok(parent, 'echo -n from-parent > /mnt/v/parent.txt')
    const [kid] = await Sandbox.fork(parent.sandboxId, { count: 1 })
    assert.ok(!(kid instanceof Error), `fork failed: ${kid}`)
    extra.push(kid.sandboxId)
    assert.equal(await ok(kid, 'cat /mnt/v/parent.txt', { timeoutMs: 120_000 }), 'from-parent')
    await ok(kid, 'echo -n from-child > /mnt/v/child.txt')
    assert.equal(await ok(parent, 'cat /mnt/v/child.txt'), 'from-child')
    assert.equal(await v.readFile('/child.txt'), 'from-child')
  })

  it('a sandbox created from a named snapshot mounts the same volume', { timeout: T }, async () => {
    const v = await newVolume()
    const src = await t.create({ volumeMounts: { '/mnt/v': v } })
    await ok(src, 'echo -n from-src > /mnt/v/src.txt')
    const name = `vmvolsnap-${uniq()}`
    const snap = await src.createSnapshot({ name })
    const s = await Sandbox.create(name, { timeoutMs: 300_000, metadata: t.metadata })
    extra.push(s.sandboxId)
    assert.equal(await ok(s, 'cat /mnt/v/src.txt', { timeoutMs: 120_000 }), 'from-src')
    await ok(s, 'echo -n from-snap > /mnt/v/snap.txt')
    assert.equal(await v.readFile('/snap.txt'), 'from-snap')
    assert.equal(await ok(src, 'cat /mnt/v/snap.txt'), 'from-snap')
    await Sandbox.deleteSnapshot(snap.snapshotId)
  })

  it('no other sandbox reaches a VM\'s NFS server', { timeout: T }, async () => {
    const v = await newVolume()
    const [a, b] = await Promise.all([t.create({ volumeMounts: { '/mnt/v': v } }), t.create()])
    const gwA = gatewayOf((await ok(a, addr)).trim())
    // A reaches its own server (the positive control), at the fixed address
    // and at its host address.
    assert.equal((await ok(a, probe('169.254.20.49', 2049, 20), { user: 'root' })).trim(), 'open')
    assert.equal((await ok(a, probe(gwA, 20490, 20), { user: 'root' })).trim(), 'open')
    // B, without volumes, has no server behind the same address, and A's
    // server on A's host address does not answer it.
    assert.equal((await ok(b, probe('169.254.20.49', 2049), { user: 'root' })).trim(), 'closed')
    assert.equal((await ok(b, probe(gwA, 20490), { user: 'root' })).trim(), 'closed')
    const gwB = gatewayOf((await ok(b, addr)).trim())
    assert.equal((await ok(b, probe(gwB, 20490), { user: 'root' })).trim(), 'closed')
  })
})
