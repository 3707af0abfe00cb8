// Shared helpers of the cluster end-to-end tests. The cluster is the one
// scripts/run-cluster.sh starts: 3 `--role node` daemons, 2 `--role api`
// instances and haproxy in front of them. Its environment comes from
// $AIRLOCK_CLUSTER_STATE/env (default /var/lib/airlock-cluster/env), else
// from the variables already set (E2B_API_URL = haproxy, AIRLOCK_CLUSTER_API1,
// AIRLOCK_CLUSTER_API2, AIRLOCK_CLUSTER_PIDS, AIRLOCK_CLUSTER_CMDS, …).
import { execFileSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { randomBytes } from 'node:crypto'
import { Sandbox, CommandExitError } from 'e2b'

function loadEnv () {
  const state = process.env.AIRLOCK_CLUSTER_STATE || '/var/lib/airlock-cluster'
  const file = `${state}/env`
  if (!existsSync(file)) return
  // The env file is shell (`export K=V`, values quoted by the script): let
  // bash read it.
  const out = execFileSync('bash', ['-c', 'set -a && . "$1" && env -0', 'env', file])
  for (const kv of out.toString().split('\0')) {
    const i = kv.indexOf('=')
    if (i <= 0) continue
    const k = kv.slice(0, i)
    if (k === 'E2B_API_URL' || k === 'E2B_SANDBOX_URL' || k === 'E2B_API_KEY' || k.startsWith('AIRLOCK_CLUSTER_')) {
      process.env[k] = kv.slice(i + 1)
    }
  }
}
loadEnv()

for (const name of ['E2B_API_URL', 'E2B_API_KEY', 'AIRLOCK_CLUSTER_API1', 'AIRLOCK_CLUSTER_API2', 'AIRLOCK_CLUSTER_PIDS', 'AIRLOCK_CLUSTER_CMDS']) {
  if (!process.env[name]) {
    throw new Error(`${name} is not set: start a cluster with scripts/run-cluster.sh up and set AIRLOCK_CLUSTER_STATE (or source its env file)`)
  }
}

/** Milliseconds for one test. */
export const TEST_TIMEOUT = 180_000

/** haproxy, the cluster's one entry point. */
export const LB = process.env.E2B_API_URL
export const API1 = process.env.AIRLOCK_CLUSTER_API1
export const API2 = process.env.AIRLOCK_CLUSTER_API2
export const API_KEY = process.env.E2B_API_KEY
export const NODE_IDS = (process.env.AIRLOCK_CLUSTER_NODES || 'n1 n2 n3').split(/\s+/).filter(Boolean)
/** The node's own URL (its internal API, behind the cluster secret). */
export function nodeURL (id) { return process.env[`AIRLOCK_CLUSTER_NODE_${id.toUpperCase()}`] }
export function clusterSecret () {
  return readFileSync(process.env.AIRLOCK_CLUSTER_SECRET_FILE, 'utf8').trim()
}
/**
 * The headers the api tier sends a node: the cluster secret, and the mark
 * that it checked the client's API key (a node serves its API only with both).
 */
export function asAPITier () {
  return { 'X-Airlock-Cluster-Secret': clusterSecret(), 'X-Airlock-Authenticated': 'api-key' }
}

/** SDK connection options that talk to one api instance (or haproxy) only. */
export function via (base) {
  return { apiUrl: base, sandboxUrl: base, apiKey: API_KEY }
}

export function uniq () {
  return randomBytes(6).toString('hex')
}

export function sleep (ms) {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** Polls fn until it returns a truthy value or timeoutMs passes; returns the last value. */
export async function waitUntil (fn, timeoutMs, intervalMs = 250) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    let v
    try {
      v = await fn()
    } catch {
      v = undefined
    }
    if (v || Date.now() >= deadline) return v
    await sleep(intervalMs)
  }
}

/** A raw request to the E2B API of base (haproxy or one api instance). */
export async function api (base, method, path, body, timeoutMs = 60_000) {
  const res = await fetch(base + path, {
    method,
    headers: { 'X-API-Key': API_KEY, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs)
  })
  const text = await res.text()
  let json
  try { json = text ? JSON.parse(text) : undefined } catch { json = undefined }
  return { status: res.status, body: json, text, node: res.headers.get('x-airlock-node'), headers: res.headers }
}

/**
 * Creates a sandbox with a raw POST /v2/sandboxes (so the X-Airlock-Node
 * header of the response says where it landed); returns {id, node, body}.
 */
export async function createRaw (base, templateID = 'base', metadata = {}, timeout = 300) {
  const r = await api(base, 'POST', '/v2/sandboxes', { templateID, timeout, metadata }, 120_000)
  if (r.status !== 201) throw new Error(`create ${templateID} through ${base}: ${r.status} ${r.text}`)
  if (!r.node) throw new Error(`create through ${base}: no X-Airlock-Node header on the response`)
  return { id: r.body.sandboxID, node: r.node, body: r.body }
}

/** GET /airlock/v1/nodes: the nodes as the api tier sees them. */
export async function nodes (base = LB) {
  const r = await api(base, 'GET', '/airlock/v1/nodes')
  if (r.status !== 200 || !Array.isArray(r.body)) throw new Error(`GET /airlock/v1/nodes through ${base}: ${r.status} ${r.text}`)
  return r.body
}

/** Sandbox ids created through a tracker; killAll removes whatever is left. */
export function tracker (suite) {
  const tag = `${suite}-${uniq()}`
  const created = new Set()
  return {
    tag,
    metadata: { 'cluster-suite': tag },
    add (id) { created.add(id); return id },
    forget (id) { created.delete(id) },
    async create (opts = {}) {
      const sbx = await Sandbox.create({
        timeoutMs: 300_000,
        ...opts,
        metadata: { 'cluster-suite': tag, ...(opts.metadata ?? {}) }
      })
      created.add(sbx.sandboxId)
      return sbx
    },
    async createRaw (base, template = 'base') {
      const s = await createRaw(base, template, { 'cluster-suite': tag })
      created.add(s.id)
      return s
    },
    async killAll () {
      await Promise.allSettled([...created].map((id) => Sandbox.kill(id, via(LB))))
      created.clear()
    }
  }
}

/** Runs cmd and returns {exitCode, stdout, stderr} without throwing on a non-zero exit. */
export async function sh (sbx, cmd, opts = {}) {
  try {
    const r = await sbx.commands.run(cmd, opts)
    return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr }
  } catch (err) {
    if (err instanceof CommandExitError) {
      return { exitCode: err.exitCode, stdout: err.stdout, stderr: err.stderr }
    }
    throw err
  }
}

// ------------------------------------------------------------ daemons

/** The pid of a cluster daemon (api1, n2, haproxy, postgres, …). */
export function pidOf (name) {
  return Number(readFileSync(`${process.env.AIRLOCK_CLUSTER_PIDS}/${name}.pid`, 'utf8').trim())
}

export function alive (pid) {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** SIGKILLs a daemon and waits until it is gone. */
export async function killDaemon (name) {
  const pid = pidOf(name)
  process.kill(pid, 'SIGKILL')
  if (!(await waitUntil(() => !alive(pid), 10_000, 50))) throw new Error(`${name} (pid ${pid}) still alive after SIGKILL`)
  return pid
}

/** Starts a daemon again with the exact command run-cluster.sh used (cmd/<name>). */
export function restartDaemon (name) {
  execFileSync('bash', [`${process.env.AIRLOCK_CLUSTER_CMDS}/${name}`], { stdio: 'inherit' })
  return pidOf(name)
}

/**
 * Starts a node again with its cmd/<name>, as a supervisor would, and waits
 * for /health; returns the ms from the first attempt to healthy. Within 30 s
 * of a SIGKILL the store's per-node daemon lease of the killed process is
 * not stale yet: the new daemon (same host) waits for it; should one exit
 * instead, it is started again.
 */
export async function restartNode (name, withinMs = 60_000) {
  const start = Date.now()
  for (;;) {
    const pid = restartDaemon(name)
    if (!(await waitUntil(() => !alive(pid), 3_000, 100))) break
    if (Date.now() - start > withinMs) throw new Error(`${name} keeps exiting at start:\n${logTail(name, 5)}`)
    await sleep(2_000)
  }
  await waitHealthy(nodeURL(name), 120_000).catch((err) => {
    throw new Error(`${err.message}\n${logTail(name)}`)
  })
  return Date.now() - start
}

/** Restarts PostgreSQL as run-cluster.sh set it up (pg_ctl restart -m fast, as postgres). */
export function restartPostgres () {
  execFileSync('bash', [`${process.env.AIRLOCK_CLUSTER_CMDS}/postgres-restart`], { stdio: ['ignore', 'ignore', 'inherit'] })
}

/** Waits until GET url/health answers 200 (and pred(body) holds, if given). */
export async function waitHealthy (url, timeoutMs = 120_000, pred = () => true) {
  const ok = await waitUntil(async () => {
    const res = await fetch(url + '/health', { signal: AbortSignal.timeout(2_000) })
    if (res.status !== 200) return false
    const text = await res.text()
    let body
    try { body = JSON.parse(text) } catch { body = text }
    return pred(body)
  }, timeoutMs, 250)
  if (!ok) throw new Error(`${url}/health not healthy within ${timeoutMs} ms`)
}

/** The last lines of a daemon's log, for assertion messages. */
export function logTail (name, lines = 30) {
  try {
    return readFileSync(`${process.env.AIRLOCK_CLUSTER_LOGS}/${name}.log`, 'utf8').split('\n').slice(-lines).join('\n')
  } catch (err) {
    return `(no log: ${err.message})`
  }
}
