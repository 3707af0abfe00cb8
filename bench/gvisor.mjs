#!/usr/bin/env node
// Old vs new gVisor through Airlock, each next to bare runsc (bench/gvisor.sh
// starts the daemons and sets BENCH_TARGETS). For every target it measures,
// samples interleaved across targets:
//   through Airlock (the official @e2b/code-interpreter SDK, code-interpreter-v1):
//     dd      400k one-byte syscalls (dd bs=1 count=200000), timed inside the sandbox
//     import  python3 -c 'import pandas, matplotlib.pyplot, numpy', timed inside
//     create → first runCode("1+1") result (default create: boot snapshot)
//     pause, resume (connect of the paused sandbox), fork ×4 (all children
//       answered a command), of an interpreter sandbox with pandas imported
//     runCode("1+1") and a `true` command round trip on a running sandbox
//   bare runsc (same binary and platform, the template's root filesystem
//     read-only, no network): dd and import timed the same way inside the
//     sandbox; checkpoint and restore of a python3 process with pandas loaded.
// Prints p50 / p99 per row and target, Airlock/bare ratios and old/new.
//
// BENCH_TARGETS: name=url=daemonRunsc=bareRunsc=platform=dataDir,...
// E2B_API_KEY: the daemons' key. BENCH_N (default 20), BENCH_N_SLOW (default 3).
import { execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, writeFileSync, existsSync, rmSync, mkdirSync, openSync, closeSync } from 'node:fs'
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import { loadSDK } from './sdk.mjs'

const { Sandbox } = await loadSDK('@e2b/code-interpreter')
const apiKey = process.env.E2B_API_KEY
const N = Number(process.env.BENCH_N || 20)
const NSLOW = Number(process.env.BENCH_N_SLOW || 3)
const targets = process.env.BENCH_TARGETS.split(',').map((s) => {
  const [name, url, runsc, bare, platform, data] = s.split('=')
  return { name, url, runsc, bare, platform, data }
})
const conn = (tg) => ({ apiUrl: tg.url, sandboxUrl: tg.url, apiKey, requestTimeoutMs: 600_000 })
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const results = {} // row → target → [ms]
const add = (row, tg, ms) => { ((results[row] ||= {})[tg.name] ||= []).push(ms) }
const now = () => performance.now()

const DD = 'dd bs=1 count=200000 if=/dev/zero of=/dev/null 2>/dev/null'
const IMPORT = "python3 -c 'import pandas, matplotlib.pyplot, numpy'"
// Prints the command's wall time in ms, measured inside the sandbox.
const timed = (cmd) => `s=$(date +%s%N); ${cmd}; e=$(date +%s%N); echo $(( (e - s) / 1000000 ))`

// --- bare runsc -------------------------------------------------------------
function templateRoot (data, name) {
  for (const h of readdirSync(join(data, 'templates'))) {
    const meta = join(data, 'templates', h, 'meta.json')
    if (existsSync(meta) && JSON.parse(readFileSync(meta, 'utf8')).name === name) return join(data, 'templates', h, 'rootfs')
  }
  throw new Error(`no ${name} template in ${data}`)
}

function bundle (dir, rootfs, args) {
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, 'config.json'), JSON.stringify({
    ociVersion: '1.0.2',
    process: { terminal: false, user: { uid: 0, gid: 0 }, args, env: ['PATH=/usr/local/bin:/usr/bin:/bin', 'HOME=/root', 'MPLBACKEND=Agg'], cwd: '/' },
    root: { path: rootfs, readonly: true },
    hostname: 'bare',
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc' },
      { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'mode=755'] },
      { destination: '/tmp', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'mode=1777'] },
      { destination: '/root', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'mode=700'] }
    ],
    linux: { namespaces: [{ type: 'pid' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }, { type: 'network' }] }
  }))
}

let bareSeq = 0
function bareArgs (tg, root) {
  return ['--root', root, '--platform', tg.platform, '--network', 'none', '--overlay2', 'none']
}

// Runs cmd (sh -c) to completion in a fresh bare sandbox; returns its
// stdout (through a file: runsc with a pipe for stdio can block).
async function bareRun (tg, cmd) {
  const work = mkdtempSync(join(tmpdir(), 'bare-'))
  try {
    bundle(join(work, 'b'), templateRoot(tg.data, 'code-interpreter-v1'), ['/bin/sh', '-c', cmd])
    const out = join(work, 'out')
    const fd = openSync(out, 'w')
    const p = spawn(tg.bare, [...bareArgs(tg, join(work, 'root')), 'run', '--bundle', join(work, 'b'), `bare${bareSeq++}`], { stdio: ['ignore', fd, 'ignore'] })
    const code = await new Promise((resolve) => p.on('exit', resolve))
    closeSync(fd)
    if (code !== 0) throw new Error(`bare runsc run: exit ${code}`)
    return readFileSync(out, 'utf8')
  } finally {
    try { execFileSync('umount', ['-l', join(work, 'root', 'null-netns')], { stdio: 'ignore' }) } catch {}
    rmSync(work, { recursive: true, force: true })
  }
}

// Checkpoint and restore of a python3 process with pandas loaded.
async function bareCheckpoint (tg) {
  const work = mkdtempSync(join(tmpdir(), 'barecp-'))
  const id = `barecp${bareSeq++}`
  const g = bareArgs(tg, join(work, 'root'))
  const run = (args, opts = {}) => execFileSync(tg.bare, [...g, ...args], { stdio: ['ignore', 'pipe', 'pipe'], ...opts })
  try {
    bundle(join(work, 'b'), templateRoot(tg.data, 'code-interpreter-v1'),
      ['/usr/bin/python3', '-c', 'import pandas, time, sys\nprint("ready", flush=True)\nwhile True: time.sleep(0.1)'])
    const out = join(work, 'out')
    writeFileSync(out, '')
    const fd = openSync(out, 'a')
    const p = spawn(tg.bare, [...g, 'run', '--detach', '--bundle', join(work, 'b'), id], { stdio: ['ignore', fd, fd], detached: true })
    await new Promise((resolve) => p.on('exit', resolve))
    for (let i = 0; i < 600 && !readFileSync(out, 'utf8').includes('ready'); i++) await sleep(50)
    const img = join(work, 'img')
    mkdirSync(img)
    let t = now()
    run(['checkpoint', '--image-path', img, id])
    add('bare: checkpoint (python + pandas)', tg, now() - t)
    run(['delete', '--force', id])
    t = now()
    const r = spawn(tg.bare, [...g, 'restore', '--detach', '--image-path', img, '--bundle', join(work, 'b'), id], { stdio: ['ignore', fd, fd], detached: true })
    await new Promise((resolve) => r.on('exit', resolve))
    add('bare: restore (python + pandas)', tg, now() - t)
    const size = execFileSync('du', ['-sk', img], { encoding: 'utf8' }).split('\t')[0]
    add('bare: checkpoint image size (MiB)', tg, Number(size) / 1024)
    run(['kill', id, 'KILL'])
    await sleep(200)
    run(['delete', '--force', id])
    closeSync(fd)
  } finally {
    try { execFileSync('umount', ['-l', join(work, 'root', 'null-netns')], { stdio: 'ignore' }) } catch {}
    rmSync(work, { recursive: true, force: true })
  }
}

// --- through Airlock --------------------------------------------------------
async function inSandboxMs (sbx, cmd) {
  const r = await sbx.commands.run(timed(cmd), { timeoutMs: 600_000 })
  return Number(r.stdout.trim())
}

async function createFirstCell (tg) {
  const t = now()
  const sbx = await Sandbox.create({ ...conn(tg), timeoutMs: 600_000 })
  const ex = await sbx.runCode('1+1')
  add('airlock: create → first runCode', tg, now() - t)
  if (ex.text !== '2') throw new Error(`${tg.name}: runCode("1+1") = ${ex.text}`)
  return sbx
}

async function lifecycle (tg, sbx) {
  await sbx.runCode('import pandas as pd; x = 41')
  let t = now()
  await sbx.betaPause()
  add('airlock: pause', tg, now() - t)
  t = now()
  const again = await Sandbox.connect(sbx.sandboxId, conn(tg))
  add('airlock: resume (connect)', tg, now() - t)
  const ex = await again.runCode('x + 1')
  if (ex.text !== '42') throw new Error(`${tg.name}: after resume x + 1 = ${ex.text}`)
  return again
}

async function fork4 (tg, sbx) {
  const t = now()
  const kids = await Sandbox.fork(sbx.sandboxId, { ...conn(tg), count: 4 })
  const ok = kids.filter((k) => !(k instanceof Error))
  await Promise.all(ok.map((k) => k.commands.run('true')))
  add('airlock: fork ×4 (all children ran a command)', tg, now() - t)
  if (ok.length !== 4) throw new Error(`${tg.name}: fork: ${kids.filter((k) => k instanceof Error).join('; ')}`)
  await Promise.allSettled(ok.map((k) => k.kill()))
}

function pct (xs, p) {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]
}

function fmt (ms) {
  if (ms === undefined) return '—'
  return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(ms < 10 ? 1 : 0)} ms`
}

// ---------------------------------------------------------------------------
for (const tg of targets) {
  const h = await (await fetch(`${tg.url}/health`)).json()
  console.error(`${tg.name}: ${tg.url} platform ${h.platform} (${h.platformReason})`)
}
const keep = {}
for (const tg of targets) keep[tg.name] = await createFirstCell(tg) // warm-up, not counted
for (const tg of targets) delete results['airlock: create → first runCode']

for (let i = 0; i < NSLOW; i++) {
  for (const tg of targets) {
    console.error(`${tg.name}: slow round ${i + 1}/${NSLOW}`)
    add('dd: airlock (in-sandbox)', tg, await inSandboxMs(keep[tg.name], DD))
    add('dd: bare runsc', tg, Number((await bareRun(tg, timed(DD))).trim()))
    add('import: airlock (in-sandbox)', tg, await inSandboxMs(keep[tg.name], IMPORT))
    add('import: bare runsc', tg, Number((await bareRun(tg, timed(IMPORT))).trim()))
    await bareCheckpoint(tg)
    await fork4(tg, keep[tg.name])
  }
}
for (let i = 0; i < Math.max(5, Math.ceil(N / 2)); i++) {
  for (const tg of targets) {
    const sbx = await createFirstCell(tg)
    const resumed = await lifecycle(tg, sbx)
    await resumed.kill()
  }
}
for (let i = 0; i < N; i++) {
  for (const tg of targets) {
    const sbx = keep[tg.name]
    let t = now()
    await sbx.runCode('1+1')
    add('airlock: runCode("1+1")', tg, now() - t)
    t = now()
    await sbx.commands.run('true')
    add('airlock: `true` command round trip', tg, now() - t)
  }
}
await Promise.allSettled(Object.values(keep).map((s) => s.kill()))

// --- table ------------------------------------------------------------------
const names = targets.map((t) => t.name)
const head = ['workload', ...names.map((n) => `${n} p50 / p99`)]
if (names.length === 2) head.push(`${names[0]}/${names[1]} (p50)`)
const rows = [head, head.map(() => '---')]
for (const [row, per] of Object.entries(results)) {
  const isSize = row.includes('MiB')
  const cell = (xs) => xs ? (isSize ? `${pct(xs, 50).toFixed(1)} MiB` : `${fmt(pct(xs, 50))} / ${fmt(pct(xs, 99))}`) : '—'
  const r = [row, ...names.map((n) => cell(per[n]))]
  if (names.length === 2 && per[names[0]] && per[names[1]]) r.push(`${(pct(per[names[0]], 50) / pct(per[names[1]], 50)).toFixed(1)}×`)
  rows.push(r)
}
for (const [w, a, b] of [['dd', 'dd: airlock (in-sandbox)', 'dd: bare runsc'], ['import', 'import: airlock (in-sandbox)', 'import: bare runsc']]) {
  const r = [`${w}: Airlock / bare (p50)`]
  for (const n of names) r.push(results[a]?.[n] && results[b]?.[n] ? `${(pct(results[a][n], 50) / pct(results[b][n], 50)).toFixed(2)}×` : '—')
  if (names.length === 2) r.push('')
  rows.push(r)
}
const counts = Object.fromEntries(Object.entries(results).map(([k, v]) => [k, v[names[0]]?.length ?? 0]))
console.log(rows.map((r) => `| ${r.join(' | ')} |`).join('\n'))
console.log(`\nsamples per row: ${JSON.stringify(counts)}`)
