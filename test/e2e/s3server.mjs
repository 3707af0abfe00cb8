// A throwaway S3 server for the bucket-volume tests: this repository's
// versitygw (scripts/build-s3-server.sh) on a free loopback port, with its
// own data dir, credentials and bucket, and a SigV4-signed curl as the
// tests' own S3 client. The secret is unique, so a search for it finds
// nothing else.
import assert from 'node:assert/strict'
import { spawn, execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, mkdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, dirname } from 'node:path'
import { createServer } from 'node:net'
import { fileURLToPath } from 'node:url'
import { createHash } from 'node:crypto'
import { uniq, waitUntil, sleep } from './helpers.mjs'

const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..')
const version = readFileSync(join(repo, 'internal/artifacts/s3test/versitygw.version'), 'utf8').trim()
const gwBin = process.env.AIRLOCK_S3_SERVER ||
  join(process.env.AIRLOCK_S3_SERVER_CACHE || '/var/cache/airlock/versitygw', version, 'versitygw')

async function freePort () {
  return new Promise((resolve) => {
    const srv = createServer()
    srv.listen(0, '127.0.0.1', () => { const p = srv.address().port; srv.close(() => resolve(p)) })
  })
}

/** S3 server with keys named after tag (a short prefix). Call start() first. */
export function newS3Server (tag) {
  const s3 = {
    dir: mkdtempSync(join(tmpdir(), `airlock-${tag}-`)),
    key: `${tag}key${uniq()}`,
    secret: `${tag}SECRET${uniq()}${uniq()}`,
    bucket: `${tag}-${uniq()}`.toLowerCase(),
    port: 0,
    proc: null,

    get endpoint () { return `http://127.0.0.1:${s3.port}` },

    /** Starts the server (on the same port after a stop) and waits for it. */
    async start () {
      if (!s3.port) s3.port = await freePort()
      mkdirSync(join(s3.dir, 'root'), { recursive: true })
      s3.proc = spawn(gwBin, ['--port', `127.0.0.1:${s3.port}`, '--region', 'us-east-1', '--quiet', 'posix', join(s3.dir, 'root')], {
        env: { ...process.env, ROOT_ACCESS_KEY_ID: s3.key, ROOT_SECRET_ACCESS_KEY: s3.secret },
        stdio: 'ignore'
      })
      const up = await waitUntil(async () => {
        try { await fetch(`${s3.endpoint}/`); return true } catch { return false }
      }, 15_000)
      assert.ok(up, `versitygw (${gwBin}) did not start`)
    },

    async stop () {
      if (!s3.proc) return
      const exited = new Promise((resolve) => s3.proc.once('exit', resolve))
      s3.proc.kill('SIGTERM')
      await Promise.race([exited, sleep(10_000)])
      s3.proc.kill('SIGKILL')
      s3.proc = null
    },

    /** Stops the server and removes its data. */
    async remove () {
      await s3.stop()
      rmSync(s3.dir, { recursive: true, force: true })
    },

    /** A SigV4-signed request with curl: {status, body}. */
    curl (method, key, data) {
      const sha = createHash('sha256').update(data ?? '').digest('hex') // versitygw wants the payload hash
      const args = ['-sS', '-o', '-', '-w', '\n%{http_code}', '-X', method, '--aws-sigv4', 'aws:amz:us-east-1:s3', '-H', `x-amz-content-sha256: ${sha}`,
        '--user', `${s3.key}:${s3.secret}`, `${s3.endpoint}/${s3.bucket}${key ? '/' + key : ''}`]
      if (data !== undefined) args.push('--data-binary', data)
      const out = execFileSync('curl', args, { encoding: 'utf8' })
      const i = out.lastIndexOf('\n')
      return { status: Number(out.slice(i + 1)), body: out.slice(0, i) }
    }
  }
  return s3
}
