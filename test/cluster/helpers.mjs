// Shared helpers of the cluster end-to-end tests. The cluster is the one
// scripts/run-cluster.sh starts: 3 `--role node` daemons, 2 `--role api`
// instances and haproxy in front of them. Its environment comes from
// $AIRLOCK_CLUSTER_STATE/env (default /var/lib/airlock-cluster/env), else
// from the variables already set (E2B_API_URL = haproxy, AIRLOCK_CLUSTER_API1,
// AIRLOCK_CLUSTER_API2, AIRLOCK_CLUSTER_PIDS, AIRLOCK_CLUSTER_CMDS, …).
import { execFileSync } from 'node:child_process'
import https from 'node:https'
import { existsSync, readFileSync, readdirSync } from 'node:fs'
import { randomBytes } from 'node:crypto'
import assert from 'node:assert/strict'
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
    if (k === 'E2B_API_URL' || k === 'E2B_SANDBOX_URL' || k === 'E2B_VOLUME_API_URL' || k === 'E2B_API_KEY' || k.startsWith('AIRLOCK_CLUSTER_')) {
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
/** The node's own URL (https: its API, behind mutual TLS and the cluster secret). */
export function nodeURL (id) { return process.env[`AIRLOCK_CLUSTER_NODE_${id.toUpperCase()}`] }

/**
 * TLS options of a client of the nodes (node:https): the cluster CA, and
 * the certificate and key of TLS directory dir of the cluster's tls/ (run-
 * cluster.sh: 'api' is the api tier's; a node's own, e.g. 'n2', is for
 * attacks), or no client certificate when dir is null.
 */
export function clusterTLS (dir = 'api') {
  const base = process.env.AIRLOCK_CLUSTER_TLS
  if (!base) throw new Error('AIRLOCK_CLUSTER_TLS is not set: start the cluster with this scripts/run-cluster.sh')
  const opts = { ca: readFileSync(`${base}/ca/ca.crt`) }
  if (dir === 'api') Object.assign(opts, { cert: readFileSync(`${base}/api/api.crt`), key: readFileSync(`${base}/api/api.key`) })
  else if (dir) Object.assign(opts, { cert: readFileSync(`${base}/${dir}/node.crt`), key: readFileSync(`${base}/${dir}/node.key`) })
  return opts
}

/**
 * A request to a node over TLS (fetch cannot present a client
 * certificate): by default as the api tier does, with its certificate.
 * Resolves to {status, headers: {get}, text(), json()}; rejects when the
 * connection or the TLS handshake fails.
 */
export function nodeFetch (url, { method = 'GET', headers = {}, body, timeoutMs = 60_000, tls = clusterTLS() } = {}) {
  return new Promise((resolve, reject) => {
    const req = https.request(url, { method, headers, agent: false, timeout: timeoutMs, ...tls }, (res) => {
      const chunks = []
      res.on('data', (c) => chunks.push(c))
      res.on('error', reject)
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString()
        resolve({
          status: res.statusCode,
          headers: { get: (k) => res.headers[k.toLowerCase()] ?? null },
          text: async () => text,
          json: async () => JSON.parse(text)
        })
      })
    })
    req.on('timeout', () => req.destroy(new Error(`${method} ${url}: no answer in ${timeoutMs} ms`)))
    req.on('error', reject)
    if (body !== undefined) req.write(body)
    req.end()
  })
}
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

/** The cluster's artifact store (run-cluster.sh --artifacts), '' without one. */
export const ARTIFACTS = process.env.AIRLOCK_CLUSTER_ARTIFACTS || ''

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

/**
 * Creates a sandbox on one node: a POST /v2/sandboxes to the node itself with
 * the api tier's headers (as the api tier forwards a create it placed there),
 * so a test decides where it runs; the api tier routes it by the store like
 * any other. Returns {id, node, body}.
 */
export async function createOn (node, templateID = 'base', metadata = {}, timeout = 300) {
  const res = await nodeFetch(`${nodeURL(node)}/v2/sandboxes`, {
    method: 'POST',
    headers: { ...asAPITier(), 'Content-Type': 'application/json' },
    body: JSON.stringify({ templateID, timeout, metadata }),
    timeoutMs: 120_000
  })
  const text = await res.text()
  if (res.status !== 201) throw new Error(`create ${templateID} on ${node} directly: ${res.status} ${text}`)
  return { id: JSON.parse(text).sandboxID, node, body: JSON.parse(text) }
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
    /** createOn (one node, chosen by the test) with the tracker's metadata. */
    async createOn (node, template = 'base', timeout = 300) {
      const s = await createOn(node, template, { 'cluster-suite': tag }, timeout)
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
    const res = url.startsWith('https:')
      ? await nodeFetch(url + '/health', { timeoutMs: 2_000 })
      : await fetch(url + '/health', { signal: AbortSignal.timeout(2_000) })
    if (res.status !== 200) return false
    const text = await res.text()
    let body
    try { body = JSON.parse(text) } catch { body = text }
    return pred(body)
  }, timeoutMs, 250)
  if (!ok) throw new Error(`${url}/health not healthy within ${timeoutMs} ms`)
}

/** The last lines of a daemon's log that contain substr (a sandbox id), for assertion messages. */
export function logGrep (name, substr, lines = 15) {
  try {
    const hits = readFileSync(`${process.env.AIRLOCK_CLUSTER_LOGS}/${name}.log`, 'utf8').split('\n').filter((l) => l.includes(substr))
    return `${name}'s log lines with ${substr}:\n${hits.slice(-lines).join('\n')}`
  } catch (err) {
    return `(no log: ${err.message})`
  }
}

/** The last lines of a daemon's log, for assertion messages. */
export function logTail (name, lines = 30) {
  try {
    return readFileSync(`${process.env.AIRLOCK_CLUSTER_LOGS}/${name}.log`, 'utf8').split('\n').slice(-lines).join('\n')
  } catch (err) {
    return `(no log: ${err.message})`
  }
}

// ------------------------------------------------------------ node states

/**
 * POST /airlock/v1/nodes/{id}/drain through base: placement stops there and,
 * with an artifact store, its sandboxes move to other nodes (the answer waits
 * for the moves); move: false only stops placement. Returns api()'s answer.
 */
export function drainNode (id, { move = true, base = LB, timeoutMs = 300_000 } = {}) {
  return api(base, 'POST', `/airlock/v1/nodes/${id}/drain${move ? '' : '?move=false'}`, undefined, timeoutMs)
}

/** POST /airlock/v1/nodes/{id}/undrain through base; throws unless 200. */
export async function undrainNode (id, base = LB) {
  const r = await api(base, 'POST', `/airlock/v1/nodes/${id}/undrain`)
  if (r.status !== 200) throw new Error(`undrain ${id}: ${r.status} ${r.text}`)
  return r
}

/** Waits until the api tier lists node id in state (and pred(node) holds); returns the node or throws. */
export async function waitNodeState (id, state, timeoutMs = 30_000, pred = () => true) {
  let last
  const ok = await waitUntil(async () => {
    last = (await nodes(LB)).find((n) => n.id === id)
    return last?.state === state && pred(last)
  }, timeoutMs, 250)
  if (!ok) throw new Error(`node ${id} not ${state} within ${timeoutMs} ms: ${JSON.stringify(last)}`)
  return last
}

/**
 * Leaves the cluster as the next test file expects it: every node running
 * (restarted with its cmd/<id> if its process is gone), undrained, and live
 * with a fresh heartbeat. Errors are collected and thrown at the end.
 */
export async function restoreNodes (ids = NODE_IDS) {
  const errors = []
  for (const id of ids) {
    try {
      if (!alive(pidOf(id))) await restartNode(id)
    } catch (err) {
      errors.push(`${id}: restart: ${err.message}`)
    }
  }
  for (const id of ids) {
    try {
      const n = await waitUntil(async () => (await nodes(LB)).find((x) => x.id === id && x.state !== 'lost'), 40_000, 500)
      if (n?.state === 'draining') await undrainNode(id)
      await waitNodeState(id, 'live', 30_000, (x) => x.heartbeatAgeMs < 5_000)
    } catch (err) {
      errors.push(`${id}: ${err.message}`)
    }
  }
  // Each api instance's placement reads the nodes table every second.
  await sleep(2_000)
  if (errors.length) throw new Error(`nodes not restored: ${errors.join('; ')}`)
}

// ------------------------------------------------------------ the S3 server

// scripts/test.sh's cluster stage runs versitygw as the artifact store and
// links its start command and pid file into the state dir (cmd/s3,
// pids/s3.pid); AIRLOCK_S3_ENDPOINT is its URL, AIRLOCK_CLUSTER_S3_DIR its
// directory (the bucket's objects are files under root/).

/** Whether the cluster's S3 server can be stopped and started by the tests. */
export function s3Controllable () {
  return Boolean(process.env.AIRLOCK_S3_ENDPOINT) && existsSync(`${process.env.AIRLOCK_CLUSTER_CMDS}/s3`) &&
    existsSync(`${process.env.AIRLOCK_CLUSTER_PIDS}/s3.pid`)
}

export function s3Running () {
  try {
    return alive(pidOf('s3'))
  } catch {
    return false
  }
}

/** SIGKILLs the S3 server (unreachable at once: connections refused). */
export async function stopS3 () {
  return killDaemon('s3')
}

/** Starts the S3 server again (same port, credentials and data) and waits until it answers. */
export async function startS3 (timeoutMs = 20_000) {
  if (!s3Running()) restartDaemon('s3')
  const ok = await waitUntil(async () => {
    await fetch(process.env.AIRLOCK_S3_ENDPOINT, { signal: AbortSignal.timeout(1_000) })
    return true
  }, timeoutMs, 100)
  if (!ok) throw new Error(`the S3 server at ${process.env.AIRLOCK_S3_ENDPOINT} does not answer ${timeoutMs} ms after its start`)
}

/**
 * The object keys in the artifact store's bucket whose path contains substr
 * (read from the S3 server's data directory); undefined when it is unknown.
 */
export function s3Keys (substr) {
  const dir = process.env.AIRLOCK_CLUSTER_S3_DIR
  if (!dir || !existsSync(`${dir}/root`)) return undefined
  const out = []
  const walk = (d, rel) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const r = rel ? `${rel}/${e.name}` : e.name
      if (r.includes(substr)) out.push(r)
      if (e.isDirectory()) walk(`${d}/${e.name}`, r)
    }
  }
  walk(`${dir}/root`, '')
  return out
}

// ------------------------------------------------------------ "nothing lost" checks

// A background counter: alive with the same pid and still counting after a
// move means the process itself moved (not restarted). Written with a
// rename so a read never sees the file half-written.
const COUNTER = 'i=0; while :; do i=$((i+1)); echo $i > /tmp/counter.new; mv /tmp/counter.new /tmp/counter; sleep 0.2; done'

async function counter (sbx) {
  return Number((await sbx.files.read('/tmp/counter')).trim())
}

/**
 * A base sandbox on node (createOn) with what a move must keep: a file, and
 * a background counter. Returns {id, node, sbx (an SDK object through the
 * balancer), pid, mark, count}.
 */
export async function prepare (t, node, { timeout = 300 } = {}) {
  const s = await t.createOn(node, 'base', timeout)
  const sbx = await Sandbox.connect(s.id, via(LB))
  const mark = `written on ${node} in ${s.id} (${uniq()})\n`
  await sbx.files.write('/home/user/move.txt', mark)
  const h = await sbx.commands.run(COUNTER, { background: true })
  await h.disconnect() // no output stream held across a move
  let count = 0
  await waitUntil(async () => (count = await counter(sbx)) >= 5, 15_000, 200)
  assert(count >= 5, `the counter in ${s.id} does not count: ${count}`)
  return { id: s.id, node, sbx, pid: h.pid, mark, count }
}

/** Asserts that sbx (an SDK object of m.id) has m's file and its counter process, still counting. */
export async function assertKept (m, sbx) {
  assert.equal(sbx.sandboxId, m.id)
  const host = await sbx.commands.run('hostname', { requestTimeoutMs: 120_000 })
  assert.equal(host.stdout.trim(), m.id, 'a command ran in another sandbox')
  assert.equal(await sbx.files.read('/home/user/move.txt'), m.mark, `the file of ${m.id}`)
  const procs = await sbx.commands.list()
  assert.ok(procs.some((p) => p.pid === m.pid), `the background process (pid ${m.pid}) of ${m.id} is gone: ${JSON.stringify(procs.map((p) => [p.pid, p.cmd]))}`)
  const c1 = await counter(sbx)
  assert.ok(c1 >= m.count, `the counter of ${m.id} went back from ${m.count} to ${c1}: the process was restarted`)
  let c2 = c1
  await waitUntil(async () => (c2 = await counter(sbx)) > c1, 5_000, 200)
  assert.ok(c2 > c1, `the counter of ${m.id} stopped (${c1} → ${c2} in 5 s)`)
  m.count = c2
}

/**
 * Waits until the image of paused sandbox id is in the artifact store: a
 * pause answers once the checkpoint is durable on its node, and the upload
 * follows (issue 24). Asks the node as the api tier does before a move
 * (POST …/internal/sandboxes/{id}/uploaded: it answers when the upload is
 * done, 503 when the attempt in flight failed).
 */
export async function waitUploaded (node, id, timeoutMs = 120_000) {
  const deadline = Date.now() + timeoutMs
  let last
  while (Date.now() < deadline) {
    const r = await nodeFetch(`${nodeURL(node)}/airlock/v1/internal/sandboxes/${id}/uploaded`, {
      method: 'POST',
      headers: { 'X-Airlock-Cluster-Secret': clusterSecret(), 'X-Airlock-Internal': '1', 'Content-Type': 'application/json' },
      body: 'null',
      timeoutMs: 70_000
    })
    last = `${r.status} ${await r.text()}`
    if (r.status === 200) return
    await sleep(500)
  }
  throw new Error(`the image of ${id} on ${node} is not in the artifact store after ${timeoutMs} ms: ${last}`)
}

/** GET /sandboxes/{id} through the balancer: {status, node (X-Airlock-Node), state}. */
export async function where (id, base = LB) {
  const r = await api(base, 'GET', `/sandboxes/${id}`)
  return { status: r.status, node: r.node, state: r.body?.state }
}

/** The v2 list through the balancer (the tracker's sandboxes): {id: clusterNode} of ids. */
export async function listedOn (t, ids, base = LB) {
  const q = new URLSearchParams({ metadata: `cluster-suite=${t.tag}`, limit: '100' })
  const r = await api(base, 'GET', `/v2/sandboxes?${q}`)
  if (r.status !== 200) throw new Error(`GET /v2/sandboxes: ${r.status} ${r.text}`)
  const out = {}
  for (const s of r.body) if (ids.includes(s.sandboxID)) out[s.sandboxID] = s.clusterNode
  return out
}
