#!/usr/bin/env node
// Benchmarks one template built two ways on a running Airlock daemon, in the
// SAME run, samples interleaved:
//   SDK         Template.build from the official `e2b` SDK (v3 build API:
//               POST /v3/templates, file upload, POST /v2/…/builds, status
//               polling every 200 ms as the SDK does)
//   Dockerfile  the same steps as a Dockerfile, POST /airlock/v1/templates/
//               {name}/build with a context tar (what `airlock template build`
//               sends), NDJSON progress until the result line
// each cold (skipCache / noCache=1: every step runs again) and cached (no
// change: every step served from the layer cache). Prints p50 and min.
//
// Environment: E2B_API_URL/E2B_API_KEY (or AIRLOCK_URL/AIRLOCK_API_KEY);
// BENCH_N (samples per row, default 3).
import { execFileSync } from 'node:child_process'
import { mkdtempSync, mkdirSync, writeFileSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { randomBytes } from 'node:crypto'
import { daemon, loadSDK } from './sdk.mjs'

const { apiURL, apiKey } = daemon('templates-sdk', { sandboxURL: false })
const { Template } = await loadSDK('e2b')

const N = Number(process.env.BENCH_N || 3)
const tag = randomBytes(4).toString('hex')
const ctx = mkdtempSync(join(tmpdir(), 'airlock-bench-tpl-'))
mkdirSync(join(ctx, 'site'))
writeFileSync(join(ctx, 'site', 'index.html'), `<h1>bench ${tag}</h1>\n`)
const work = 'seq 1 300000 | sha256sum > /tmp/work.txt'

const sdkTemplate = () => Template({ fileContextPath: ctx })
  .fromTemplate('base')
  .setEnvs({ APP_MODE: 'bench' })
  .copy('site/', '/home/user/site/')
  .runCmd(work)
  .setWorkdir('/home/user/site')
  .runCmd('echo built > build-id.txt')
// The same steps as the SDK's translation runs them (as user, in /home/user).
writeFileSync(join(ctx, 'Dockerfile'), [
  'FROM base', 'USER user', 'WORKDIR /home/user', 'ENV APP_MODE=bench',
  'COPY --chown=user site/ /home/user/site/', `RUN ${work}`, 'WORKDIR /home/user/site',
  'RUN echo built > build-id.txt'
].join('\n') + '\n')
execFileSync('tar', ['-cf', join(ctx, '..', `ctx-${tag}.tar`), '-C', ctx, 'Dockerfile', 'site'])
const contextTar = readFileSync(join(ctx, '..', `ctx-${tag}.tar`))

async function sdkBuild (cold) {
  await Template.build(sdkTemplate(), `bench-sdk-${tag}`, { skipCache: cold })
}

async function dockerfileBuild (cold) {
  const res = await fetch(`${apiURL}/airlock/v1/templates/bench-df-${tag}/build${cold ? '?noCache=1' : ''}`, {
    method: 'POST', headers: { 'X-API-Key': apiKey, 'Content-Type': 'application/x-tar' }, body: contextTar
  })
  const text = await res.text()
  const last = JSON.parse(text.trim().split('\n').pop())
  if (!res.ok || last.error) throw new Error(`Dockerfile build: ${res.status} ${last.error ?? text}`)
}

const rows = { 'SDK cold': [], 'Dockerfile cold': [], 'SDK cached': [], 'Dockerfile cached': [] }
async function time (row, fn) {
  const t0 = performance.now()
  await fn()
  rows[row].push(performance.now() - t0)
}

try {
  // Warm-up: the first builds pay for COPY layers and the base lookup.
  await sdkBuild(false)
  await dockerfileBuild(false)
  for (let i = 0; i < N; i++) {
    await time('SDK cold', () => sdkBuild(true))
    await time('Dockerfile cold', () => dockerfileBuild(true))
    await time('SDK cached', () => sdkBuild(false))
    await time('Dockerfile cached', () => dockerfileBuild(false))
  }
  const p50 = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]
  console.log(`template build, same 6 steps (2 RUN, 1 COPY), n=${N} each, interleaved`)
  console.log('row                 p50 ms    min ms')
  for (const [row, xs] of Object.entries(rows)) {
    console.log(`${row.padEnd(18)} ${p50(xs).toFixed(0).padStart(7)} ${Math.min(...xs).toFixed(0).padStart(9)}`)
  }
} finally {
  for (const t of [`bench-sdk-${tag}`, `bench-df-${tag}`]) {
    await fetch(`${apiURL}/templates/${t}`, { method: 'DELETE', headers: { 'X-API-Key': apiKey } }).catch(() => {})
  }
  rmSync(ctx, { recursive: true, force: true })
  rmSync(join(ctx, '..', `ctx-${tag}.tar`), { force: true })
}
