// Bucket volumes on microVMs (issue 27; scripts/test-microvm.sh runs it
// against a daemon started with --runtime microvm): the VM's NFS server
// exports the volume's s3fs mount, which has no kernel file handles, with
// handles from a path table (internal/volume/nfs/pathtable_linux.go) kept in
// the VM's dir. A file written in the VM is an object of the bucket, an
// object put in the bucket shows in the VM, a rename keeps the renamed
// file's handle, a pause/resume and a fork keep the handles the guest holds
// (the child gets a copy of the table), and the
// credentials are nowhere in the VM. The S3 server is this file's own
// versitygw on loopback (the daemon runs with --volume-bucket-allow-private).
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { newS3Server } from './s3server.mjs'

process.env.E2B_VOLUME_API_URL ??= process.env.E2B_API_URL

const { Sandbox } = await import('e2b')
const { tracker, uniq, sh, waitUntil } = await import('./helpers.mjs')

const T = 600_000
const t = tracker('microvm-volbucket')
const made = []
const api = process.env.E2B_API_URL
const headers = { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' }

const s3 = newS3Server('vb')

async function ok (sbx, cmd, opts) {
  const r = await sh(sbx, cmd, opts)
  assert.equal(r.exitCode, 0, `${cmd}: ${r.stderr}${r.stdout}`)
  return r.stdout
}

before(async () => {
  await s3.start()
  assert.equal(s3.curl('PUT', '').status, 200, 'making the bucket')
})

after(async () => {
  await t.killAll()
  await Promise.allSettled(made.map((id) => fetch(`${api}/volumes/${id}`, { method: 'DELETE', headers })))
  await s3.remove()
})

describe('bucket volumes on microVMs', { concurrency: false, timeout: T * 3 }, () => {
  let vol
  let sbx

  it('a VM writes objects, reads objects put in the bucket, renames; pause/resume keeps the mount', { timeout: T }, async () => {
    const res = await fetch(`${api}/volumes`, {
      method: 'POST',
      headers,
      body: JSON.stringify({
        name: `vmbkt-${uniq()}`,
        bucket: { endpoint: s3.endpoint, bucket: s3.bucket, prefix: 'vm/', region: 'us-east-1', accessKeyId: s3.key, secretAccessKey: s3.secret, pathStyle: true }
      })
    })
    const text = await res.text()
    assert.equal(res.status, 201, text)
    vol = JSON.parse(text)
    made.push(vol.volumeID)

    sbx = await t.create({ volumeMounts: { '/mnt/b': vol.name } })
    await ok(sbx, 'echo "from the vm" > /mnt/b/hello.txt && mkdir -p /mnt/b/dir && echo nested > /mnt/b/dir/n.txt && sync')
    assert.equal(s3.curl('GET', 'vm/hello.txt').body, 'from the vm\n')
    assert.equal(s3.curl('GET', 'vm/dir/n.txt').body, 'nested\n')

    assert.equal(s3.curl('PUT', 'vm/put.txt', 'from s3').status, 200)
    const seen = await waitUntil(async () => (await sh(sbx, 'cat /mnt/b/put.txt')).stdout === 'from s3', 60_000, 1000)
    assert.ok(seen, 'the object put in the bucket did not show in the VM')

    // A rename: the object moves, and a descriptor open across it (its
    // NFS handle) still reads the file.
    const mv = await ok(sbx, 'exec 3</mnt/b/dir/n.txt && mv /mnt/b/dir /mnt/b/moved && cat <&3 && cat /mnt/b/moved/n.txt && sync')
    assert.equal(mv, 'nested\nnested\n')
    assert.equal(s3.curl('GET', 'vm/moved/n.txt').body, 'nested\n')
    assert.equal(s3.curl('GET', 'vm/dir/n.txt').status, 404)

    // Pause/resume: the restored guest's client keeps its handles, which
    // the new server finds in the table it left in the VM's dir.
    await ok(sbx, "(cd /mnt/b/moved && setsid sleep 100000 </dev/null >/dev/null 2>&1 &)")
    assert.equal(await sbx.betaPause(), true)
    assert.equal(s3.curl('PUT', 'vm/moved/while-paused.txt', 'put while paused').status, 200)
    sbx = await Sandbox.connect(sbx.sandboxId)
    // The host forgets the s3fs inodes nothing holds (as memory pressure
    // would): a FUSE handle naming one would be stale now; a path-table
    // handle is not.
    writeFileSync('/proc/sys/vm/drop_caches', '2')
    const after = await ok(sbx, 'cat /mnt/b/hello.txt; cat /mnt/b/moved/n.txt; cd /proc/$(pgrep -x sleep | head -1)/cwd && ls', { timeoutMs: 120_000 })
    assert.match(after, /^from the vm\nnested\n/)
    assert.match(after, /while-paused\.txt/)
    await ok(sbx, 'echo -n after > /mnt/b/after.txt && sync')
    assert.equal(s3.curl('GET', 'vm/after.txt').body, 'after')
  })

  it('a fork child keeps the mount: it reads the handles its parent held and writes objects', { timeout: T }, async () => {
    assert.ok(sbx, 'no VM from the first case')
    const [kid] = await Sandbox.fork(sbx.sandboxId, { count: 1 })
    assert.ok(!(kid instanceof Error), `fork failed: ${kid}`)
    try {
      const got = await ok(kid, 'cat /mnt/b/moved/n.txt; cd /proc/$(pgrep -x sleep | head -1)/cwd && ls', { timeoutMs: 120_000 })
      assert.match(got, /^nested\n/)
      assert.match(got, /while-paused\.txt/)
      await ok(kid, 'echo -n from-child > /mnt/b/child.txt && sync')
      assert.equal(s3.curl('GET', 'vm/child.txt').body, 'from-child')
      assert.equal(await ok(sbx, 'cat /mnt/b/child.txt'), 'from-child')
    } finally {
      await Sandbox.kill(kid.sandboxId).catch(() => {})
    }
  })

  it('the secret search: no file, environment, argument or mount in the VM holds the credentials', { timeout: T }, async () => {
    assert.ok(sbx, 'no VM from the first case')
    const pat = (s) => `${s.slice(0, 3)}[${s[3]}]${s.slice(4)}`
    const canary = `canary${uniq()}`
    await sbx.files.write('/tmp/canary.txt', `x ${canary} x`)
    const script = (s) => `
P=$(printf '%s' '${pat(s)}' | tr -d '[]')
found=0
grep -rlsF -D skip -f <(printf '%s\\n' "$P") --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev / /dev/shm && found=1
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline /proc/mounts /proc/self/mountinfo /proc/cmdline; do
  grep -qsaF -f <(printf '%s\\n' "$P") "$f" && { echo "$f"; found=1; }
done
env | grep -qaF -f <(printf '%s\\n' "$P") && { echo env; found=1; }
echo "found=$found"
`
    const control = await sh(sbx, script(canary), { user: 'root', timeoutMs: T })
    assert.match(control.stdout, /\/tmp\/canary\.txt/, `the search missed its control: ${control.stdout} ${control.stderr}`)
    for (const s of [s3.secret, s3.key]) {
      const r = await sh(sbx, script(s), { user: 'root', timeoutMs: T })
      assert.match(r.stdout, /found=0\s*$/, `a credential is visible in the VM: ${r.stdout}`)
    }
  })
})
