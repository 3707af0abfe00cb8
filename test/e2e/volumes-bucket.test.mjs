// Bucket volumes (an Airlock extension; issue 27): a volume backed by a
// prefix of an S3-compatible bucket, created through the REST API with its
// endpoint and credentials, mounted by the official SDK by name like any
// volume. The node mounts the bucket on the host with s3fs; the credentials
// never enter the sandbox (the secret search below). The S3 server is this
// file's own versitygw (scripts/build-s3-server.sh), on loopback: the test
// daemon runs with --volume-bucket-allow-private. The faults (the server
// stopped, a mounted volume deleted) come last, in order.
import { describe, it, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { newS3Server } from './s3server.mjs'

process.env.E2B_VOLUME_API_URL ??= process.env.E2B_API_URL

const { Volume } = await import('e2b')
const { tracker, uniq, sh, waitUntil, sleep, TEST_TIMEOUT } = await import('./helpers.mjs')

const t = tracker('volbucket')
const made = []
const api = process.env.E2B_API_URL
const headers = { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' }

// The S3 server: its own port, data dir and credentials; the secret the
// search looks for is unique, and found nowhere else.
const s3 = newS3Server('bv')

function bucketSpec (over = {}) {
  return {
    endpoint: s3.endpoint,
    bucket: s3.bucket,
    prefix: 'data/',
    region: 'us-east-1',
    accessKeyId: s3.key,
    secretAccessKey: s3.secret,
    pathStyle: true,
    ...over
  }
}

async function createBucketVolume (name, bucket, extra = {}) {
  const res = await fetch(`${api}/volumes`, { method: 'POST', headers, body: JSON.stringify({ name, bucket, ...extra }) })
  const text = await res.text()
  let body = null
  try { body = JSON.parse(text) } catch {}
  if (res.status === 201) made.push(body.volumeID)
  return { status: res.status, body, text }
}

before(async () => {
  await s3.start()
  const r = s3.curl('PUT', '')
  assert.equal(r.status, 200, `making the bucket: ${r.body}`)
})

after(async () => {
  await t.killAll()
  await Promise.allSettled(made.map((id) => fetch(`${api}/volumes/${id}`, { method: 'DELETE', headers })))
  await s3.remove()
})

describe('bucket volumes', { concurrency: false }, () => {
  let vol // the read-write bucket volume, prefix data/

  it('create checks the bucket and echoes it without the secret', { timeout: TEST_TIMEOUT }, async () => {
    const name = `bkt-${uniq()}`
    const r = await createBucketVolume(name, bucketSpec())
    assert.equal(r.status, 201, r.text)
    vol = r.body
    assert.equal(vol.name, name)
    assert.equal(vol.sizeMB, 0)
    assert.equal(vol.bucket.bucket, s3.bucket)
    assert.equal(vol.bucket.prefix, 'data/')
    assert.equal(vol.bucket.endpoint, s3.endpoint)
    assert.equal(vol.bucket.secretAccessKey, undefined)
    assert.match(vol.bucket.accessKeyId, /^\*+.{4}$/)
    assert.ok(!r.text.includes(s3.secret) && !r.text.includes(s3.key), r.text)
    for (const path of [`/volumes/${vol.volumeID}`, '/volumes']) {
      const res = await fetch(`${api}${path}`, { headers })
      const text = await res.text()
      assert.equal(res.status, 200, text)
      assert.ok(!text.includes(s3.secret) && !text.includes(s3.key), `${path} shows a credential: ${text}`)
      const one = path === '/volumes' ? JSON.parse(text).find((x) => x.volumeID === vol.volumeID) : JSON.parse(text)
      assert.equal(one.bucket.bucket, s3.bucket, text)
    }
  })

  it('refuses wrong credentials, an unknown bucket, an unreachable endpoint and sizeMB, with 400', { timeout: TEST_TIMEOUT }, async () => {
    const cases = [
      [bucketSpec({ secretAccessKey: 'wrong-secret-key-0000' }), /bucket check failed: .*SignatureDoesNotMatch/],
      [bucketSpec({ accessKeyId: 'nobody-at-all' }), /bucket check failed: .*refused the credentials/],
      [bucketSpec({ bucket: `no-such-${uniq()}` }), /bucket check failed: .*NoSuchBucket/],
      [bucketSpec({ endpoint: 'http://127.0.0.1:1' }), /bucket check failed: .*unreachable/],
      [bucketSpec({ endpoint: 'ftp://example.com' }), /invalid bucket: bucket.endpoint/],
      [bucketSpec({ prefix: 'a/../b' }), /invalid bucket: bucket.prefix/],
      [bucketSpec({ secretAccessKey: undefined }), /invalid bucket: bucket.secretAccessKey/]
    ]
    for (const [bucket, want] of cases) {
      const r = await createBucketVolume(`bad-${uniq()}`, bucket)
      assert.equal(r.status, 400, r.text)
      assert.match(r.body.message, want)
    }
    const r = await createBucketVolume(`bad-${uniq()}`, bucketSpec(), { sizeMB: 100 })
    assert.equal(r.status, 400, r.text)
    assert.match(r.body.message, /sizeMB does not apply to a bucket volume/)
  })

  it('a sandbox writes objects and reads objects put in the bucket', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create({ volumeMounts: { '/mnt/b': vol.name } })
    const w = await sh(sbx, 'echo "from the sandbox" > /mnt/b/hello.txt && mkdir -p /mnt/b/dir && echo nested > /mnt/b/dir/n.txt && sync')
    assert.equal(w.exitCode, 0, w.stderr)
    const obj = s3.curl('GET', 'data/hello.txt')
    assert.equal(obj.status, 200, obj.body)
    assert.equal(obj.body, 'from the sandbox\n')
    assert.equal(s3.curl('GET', 'data/dir/n.txt').body, 'nested\n')
    assert.equal(s3.curl('PUT', 'data/put.txt', 'from s3').status, 200)
    const seen = await waitUntil(async () => (await sh(sbx, 'cat /mnt/b/put.txt')).stdout === 'from s3', 20_000)
    assert.ok(seen, 'the object put in the bucket did not show in the sandbox')
    // A second sandbox on the node shares the one s3fs mount.
    const other = await t.create({ volumeMounts: { '/data': vol.name } })
    assert.equal((await sh(other, 'cat /data/hello.txt')).stdout, 'from the sandbox\n')
    assert.equal((await sh(other, 'echo two > /data/two.txt')).exitCode, 0)
    const two = await waitUntil(async () => (await sh(sbx, 'cat /mnt/b/two.txt')).stdout === 'two\n', 20_000)
    assert.ok(two, "one sandbox's write did not show in the other")
    // The SDK's content API serves the same files, without a sandbox.
    const v = await Volume.connect(vol.volumeID)
    assert.equal(await v.readFile('/hello.txt'), 'from the sandbox\n')
    await v.writeFile('/sdk.txt', 'from the sdk')
    assert.equal(s3.curl('GET', 'data/sdk.txt').body, 'from the sdk')
    await Promise.all([sbx.kill(), other.kill()])
  })

  it('a read-only bucket volume is read-only in the sandbox', { timeout: TEST_TIMEOUT }, async () => {
    const r = await createBucketVolume(`ro-${uniq()}`, bucketSpec({ readOnly: true }))
    assert.equal(r.status, 201, r.text)
    assert.equal(r.body.bucket.readOnly, true)
    const sbx = await t.create({ volumeMounts: { '/mnt/ro': r.body.name } })
    assert.equal((await sh(sbx, 'cat /mnt/ro/hello.txt')).stdout, 'from the sandbox\n')
    const w = await sh(sbx, 'echo x > /mnt/ro/new.txt', { user: 'root' })
    assert.notEqual(w.exitCode, 0)
    assert.match(w.stderr, /Read-only file system/)
    assert.equal(s3.curl('GET', 'data/new.txt').status, 404)
    await sbx.kill()
  })

  it('the secret search: no file, environment, argument or mount in the sandbox holds the credentials', { timeout: 900_000 }, async () => {
    const sbx = await t.create({ volumeMounts: { '/mnt/b': vol.name } })
    // The pattern never appears literally in the searching command (its
    // /proc/<pid>/cmdline): one character in brackets.
    const pat = (s) => `${s.slice(0, 3)}[${s[3]}]${s.slice(4)}`
    const canary = `canary${uniq()}`
    await sbx.files.write('/tmp/canary.txt', `x ${canary} x`)
    // The search itself: the pattern is rebuilt inside the shell into an
    // environment-free variable and handed to grep with -f from a pipe, so
    // neither argv nor a file of the sandbox holds it.
    const script = (s) => `
P=$(printf '%s' '${pat(s)}' | tr -d '[]')
found=0
grep -rlsF -D skip -f <(printf '%s\\n' "$P") --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev / /dev/shm && found=1
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline /proc/mounts /proc/self/mountinfo; do
  grep -qsaF -f <(printf '%s\\n' "$P") "$f" && { echo "$f"; found=1; }
done
env | grep -qaF -f <(printf '%s\\n' "$P") && { echo env; found=1; }
echo "found=$found"
`
    // The search finds what is there (a control), then not the secrets.
    const control = await sh(sbx, script(canary), { user: 'root', timeoutMs: 600_000 })
    assert.match(control.stdout, /\/tmp\/canary\.txt/, `the search missed its control: ${control.stdout} ${control.stderr}`)
    assert.match(control.stdout, /found=1/)
    for (const s of [s3.secret, s3.key]) {
      const r = await sh(sbx, script(s), { user: 'root', timeoutMs: 600_000 })
      assert.match(r.stdout, /found=0\s*$/, `a credential is visible in the sandbox: ${r.stdout}`)
    }
    const mounts = await sh(sbx, 'cat /proc/mounts')
    assert.ok(!mounts.stdout.includes('passwd_file') && !mounts.stdout.includes(s3.secret), mounts.stdout)
    await sbx.kill()
  })

  it('deleting a mounted bucket volume takes the mount away and keeps the objects', { timeout: TEST_TIMEOUT }, async () => {
    const r = await createBucketVolume(`del-${uniq()}`, bucketSpec({ prefix: 'del/' }))
    assert.equal(r.status, 201, r.text)
    const sbx = await t.create({ volumeMounts: { '/mnt/d': r.body.name } })
    assert.equal((await sh(sbx, 'echo keep > /mnt/d/keep.txt && sync')).exitCode, 0)
    const del = await fetch(`${api}/volumes/${r.body.volumeID}`, { method: 'DELETE', headers })
    assert.equal(del.status, 204)
    const after = await sh(sbx, 'cat /mnt/d/keep.txt; ls /mnt/d')
    assert.notEqual(after.exitCode, 0, after.stdout)
    assert.match(after.stderr, /not connected|Input\/output error|No such file/)
    assert.equal(s3.curl('GET', 'del/keep.txt').body, 'keep\n', 'the bucket lost its object')
    assert.equal((await sh(sbx, 'echo alive')).stdout, 'alive\n')
    await sbx.kill()
  })

  it('a bucket that becomes unreachable: reads fail with EIO, the sandbox and the daemon go on', { timeout: 600_000 }, async () => {
    const sbx = await t.create({ volumeMounts: { '/mnt/b': vol.name } })
    assert.equal((await sh(sbx, 'cat /mnt/b/hello.txt')).stdout, 'from the sandbox\n')
    const b0 = Date.now() // the baseline: a read of a file not read before, the server up
    assert.equal((await sh(sbx, 'cat /mnt/b/two.txt')).stdout, 'two\n')
    const upMs = Date.now() - b0
    await s3.stop()
    const start = Date.now()
    const read = sbx.commands.run('cat /mnt/b/dir/n.txt', { timeoutMs: 300_000 }).then(
      (r) => ({ exitCode: r.exitCode, stderr: r.stderr }), (e) => ({ exitCode: e.exitCode, stderr: e.stderr ?? String(e) }))
    // While the read waits on the dead bucket, the daemon answers.
    await sleep(1000)
    const h0 = Date.now()
    const health = await fetch(`${api}/health`)
    assert.equal(health.status, 200)
    const healthMs = Date.now() - h0
    const other = await t.create({}) // a sandbox without the bucket starts
    assert.equal((await sh(other, 'echo ok')).stdout, 'ok\n')
    const r = await read
    const readMs = Date.now() - start
    assert.notEqual(r.exitCode, 0)
    assert.match(r.stderr, /Input\/output error/)
    assert.equal((await sh(sbx, 'echo still here')).stdout, 'still here\n')
    const k0 = Date.now()
    await sbx.kill()
    const killMs = Date.now() - k0
    await other.kill()
    console.log(`unreachable bucket: EIO after ${readMs} ms (server up: ${upMs} ms), /health ${healthMs} ms during the read, kill ${killMs} ms`)
  })
})
