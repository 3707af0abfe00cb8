// Browser tests of the web console against a cluster's api tier (scripts/test.sh's
// cluster stage runs this file; console.test.mjs covers a single host). Headless
// Debian chromium driven by playwright-core, like console.test.mjs: AIRLOCK_E2E_URL is
// an api tier (`airlock serve --role api`) with two or more nodes, AIRLOCK_E2E_API_KEY
// its key. Nothing is skipped: against a single host (GET /airlock/v1/nodes → 404) the
// file fails. Screenshots go to $AIRLOCK_TEST_ARTIFACTS (default
// /tmp/airlock-console-artifacts) as cluster-*.png.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { randomBytes } from 'node:crypto'
import { chromium } from 'playwright-core'

const URL_ = process.env.AIRLOCK_E2E_URL
const KEY = process.env.AIRLOCK_E2E_API_KEY
if (!URL_ || !KEY) throw new Error('AIRLOCK_E2E_URL and AIRLOCK_E2E_API_KEY must be set to a cluster\'s api tier')
const ART = process.env.AIRLOCK_TEST_ARTIFACTS || '/tmp/airlock-console-artifacts'
mkdirSync(ART, { recursive: true })
const CHROMIUM = process.env.AIRLOCK_CHROMIUM || '/usr/bin/chromium'
const SLOW = 180_000
const TAG = randomBytes(4).toString('hex')

let browser, page
const created = []
const consoleErrors = []
const failedRequests = [] // for the message of the last test

async function shot (name) {
  await page.screenshot({ path: join(ART, `cluster-${name}.png`), fullPage: true })
}

async function rest (method, path, body) {
  const headers = { 'X-API-Key': KEY }
  if (body !== undefined) headers['Content-Type'] = 'application/json'
  return fetch(URL_ + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
}

async function restJSON (method, path, body) {
  const r = await rest(method, path, body)
  const text = await r.text()
  assert.ok(r.ok, `${method} ${path}: ${r.status} ${text}`)
  return { data: text ? JSON.parse(text) : null, headers: r.headers }
}

before(async () => {
  const r = await rest('GET', '/airlock/v1/nodes')
  assert.equal(r.status, 200, `${URL_} is not a cluster's api tier: GET /airlock/v1/nodes answered ${r.status}`)
  const nodes = await r.json()
  assert.ok(nodes.filter((n) => n.state === 'live').length >= 2, `the cluster has fewer than 2 live nodes: ${JSON.stringify(nodes.map((n) => [n.id, n.state]))}`)
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--headless=new', '--disable-gpu', '--disable-dev-shm-usage']
  })
  page = await browser.newPage({ viewport: { width: 1500, height: 900 } })
  page.setDefaultTimeout(60_000)
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(`${m.text()} (${m.location().url})`) })
  page.on('pageerror', (e) => consoleErrors.push(String(e)))
  page.on('response', (r) => { if (r.status() >= 400) failedRequests.push(`${r.status()} ${r.request().method()} ${r.url()}`) })
})

after(async () => {
  await browser?.close()
  await Promise.allSettled(created.map((id) => rest('DELETE', `/sandboxes/${id}`)))
})

test('through the api tier, a browser opening / gets the console without a key, logs in, and sees a Nodes tab; the overview says which node it shows', { timeout: SLOW }, async () => {
  await page.goto(URL_ + '/')
  assert.match(page.url(), /\/console\/$/)
  const probe = page.waitForResponse((r) => r.url().endsWith('/airlock/v1/nodes'))
  await page.fill('#api-key', KEY)
  await page.click('#login')
  assert.equal((await probe).status(), 200)
  await page.locator('#nav-nodes').waitFor()
  await page.locator('#overview-node').waitFor()
  assert.match(await page.locator('#overview-node').innerText(), /node \S+/)
})

test('the Nodes view lists every node with its state, load and heartbeat, refreshed', { timeout: SLOW }, async () => {
  await page.click('#nav-nodes')
  await page.locator('#nodes').waitFor()
  const { data: nodes } = await restJSON('GET', '/airlock/v1/nodes')
  for (const n of nodes) {
    const row = page.locator(`#nodes tr[data-node="${n.id}"]`)
    await row.waitFor()
    assert.equal(await row.getAttribute('data-state'), n.state)
    assert.equal((await row.locator('.node-state .badge').innerText()).replace(/^\W+/, ''), n.state)
    assert.equal(await row.locator('td').nth(2).innerText(), n.runtime)
    assert.match(await row.locator('.node-cpu').innerText(), new RegExp(`/ ${n.cpus}$`))
    assert.match(await row.locator('.node-sandboxes').innerText(), new RegExp(`/ ${n.maxSandboxes}`))
    assert.match(await row.locator('.node-heartbeat').innerText(), /^\d+\.\d s ago$/)
    const names = n.templates.filter((t) => !/^[0-9a-f]{64}$/.test(t))
    assert.equal(await row.locator('.node-templates').innerText(), String(names.length))
    for (const l of n.labels) await row.locator('.tag', { hasText: l }).waitFor()
  }
  assert.equal(await page.locator('#nodes tbody tr').count(), nodes.length)
  // Refreshed: the heartbeat age changes within a few seconds.
  const first = nodes[0].id
  const age = await page.locator(`#nodes tr[data-node="${first}"] .node-heartbeat`).innerText()
  await page.waitForFunction(([id, was]) => document.querySelector(`#nodes tr[data-node="${id}"] .node-heartbeat`)?.textContent !== was, [first, age], { timeout: 15_000 })
  await shot('01-nodes')
})

test('a lost and a draining node are marked (the nodes API answer replaced in the browser)', { timeout: SLOW }, async () => {
  const { data: real } = await restJSON('GET', '/airlock/v1/nodes')
  const lostAt = new Date(Date.now() - 60_000).toISOString()
  const fake = [
    { ...real[0], id: 'fake-live', state: 'live', heartbeatAgeMs: 900, reservedCpus: 6, cpus: 8 },
    { ...real[0], id: 'fake-draining', state: 'draining', heartbeatAgeMs: 1200 },
    { ...real[0], id: 'fake-lost', state: 'lost', heartbeatAgeMs: 75_000, lostAt }
  ]
  await page.route('**/airlock/v1/nodes', (route) => route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(fake) }))
  try {
    await page.locator('#nodes tr[data-node="fake-lost"]').waitFor({ timeout: 15_000 })
    const lost = page.locator('#nodes tr[data-node="fake-lost"]')
    assert.equal(await lost.getAttribute('class'), 'node-lost')
    assert.match(await lost.locator('.badge.node.lost').innerText(), /✕ lost/)
    assert.match(await lost.locator('.node-state').innerText(), /since /)
    const draining = page.locator('#nodes tr[data-node="fake-draining"]')
    assert.match(await draining.locator('.badge.node.draining').innerText(), /‖ draining/)
    assert.equal(await page.locator('#nodes tr[data-node="fake-live"] .badge.node.live').innerText(), 'live')
    assert.match(await page.locator('#stat-nodes').innerText(), /1 \/ 1 \/ 1/)
    await shot('02-nodes-marked')
  } finally {
    await page.unroute('**/airlock/v1/nodes')
  }
  await page.locator(`#nodes tr[data-node="${real[0].id}"]`).waitFor({ timeout: 15_000 })
})

test('the sandboxes list and the sandbox page show the node each sandbox is on; the terminal works through the api tier', { timeout: 6 * 60_000 }, async () => {
  // Two sandboxes: with two idle nodes, placement usually spreads them.
  const ids = []
  for (let i = 0; i < 2; i++) {
    const { data } = await restJSON('POST', '/v2/sandboxes', { templateID: 'base', timeout: 300, metadata: { consoleCluster: TAG } })
    created.push(data.sandboxID)
    ids.push(data.sandboxID)
  }
  const nodeOf = {}
  for (const id of ids) {
    const { headers } = await restJSON('GET', `/sandboxes/${id}`)
    nodeOf[id] = headers.get('X-Airlock-Node')
    assert.ok(nodeOf[id], `GET /sandboxes/${id} names its node`)
  }
  const { data: listed } = await restJSON('GET', `/v2/sandboxes?metadata=${encodeURIComponent(`consoleCluster=${TAG}`)}`)
  for (const id of ids) assert.equal(listed.find((s) => s.sandboxID === id)?.clusterNode, nodeOf[id], `the list names ${id}'s node`)

  await page.click('#nav-sandboxes')
  await page.fill('#filter-metadata', `consoleCluster=${TAG}`)
  await page.press('#filter-metadata', 'Enter')
  await page.locator('#sandboxes th', { hasText: 'Node' }).waitFor()
  for (const id of ids) {
    const cell = page.locator(`#sandboxes tr[data-sandbox="${id}"] .sandbox-node`)
    await cell.waitFor({ timeout: SLOW })
    assert.equal(await cell.innerText(), nodeOf[id])
  }
  await shot('03-sandboxes')

  // The Nodes view counts them (by the next heartbeats).
  await page.click('#nav-nodes')
  for (const n of new Set(Object.values(nodeOf))) {
    const want = Object.values(nodeOf).filter((x) => x === n).length
    await page.waitForFunction(([id, k]) => {
      const t = document.querySelector(`#nodes tr[data-node="${id}"] .node-sandboxes`)?.textContent || ''
      return parseInt(t, 10) >= k
    }, [n, want], { timeout: 20_000 })
  }

  // The sandbox page names the node, and its terminal (key in the socket's first message,
  // checked by the api tier) runs a command on that node's sandbox.
  const id = ids[0]
  await page.goto(`${URL_}/console/#/sandboxes/${id}`)
  await page.locator('#sandbox-node').waitFor()
  assert.equal(await page.locator('#sandbox-node b').innerText(), nodeOf[id])
  await page.locator('#terminal-status', { hasText: 'connected' }).waitFor({ timeout: SLOW })
  await page.locator('#terminal .xterm-rows').waitFor()
  await page.click('#terminal')
  await page.keyboard.type('echo TERM-$((40+2))\n')
  await page.waitForFunction(() => document.querySelector('#terminal .xterm-rows')?.innerText.includes('TERM-42'), null, { timeout: SLOW })
  await shot('04-sandbox')

  for (const x of ids) await restJSON('DELETE', `/sandboxes/${x}`)
  created.length = 0
})

test('no errors in the browser console', () => {
  assert.deepEqual(consoleErrors, [], `no errors in the browser console (failed requests: ${failedRequests.join(', ') || 'none'})`)
})
