// The console's live activity panel and lifecycle events (issue 28) in the
// browser: a sandbox's page follows GET /sandboxes/{id}/activity as
// server-sent events (fetch streaming, the API key in a header), so a command
// run through the SDK shows its process, file and egress entries live; the
// type filters and pause/resume act on the view; a dropped stream is reopened
// with Last-Event-ID; the Events tab lists the sandbox's lifecycle events.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { chromium } from 'playwright-core'
import { Sandbox } from 'e2b'

const URL_ = process.env.AIRLOCK_E2E_URL
const KEY = process.env.AIRLOCK_E2E_API_KEY
if (!URL_ || !KEY) throw new Error('AIRLOCK_E2E_URL and AIRLOCK_E2E_API_KEY must be set (scripts/test.sh does this)')
const ART = process.env.AIRLOCK_TEST_ARTIFACTS || '/tmp/airlock-console-artifacts'
mkdirSync(ART, { recursive: true })
const CHROMIUM = process.env.AIRLOCK_CHROMIUM || '/usr/bin/chromium'
const SLOW = 240_000
// A documentation address (TEST-NET-3) the sandbox's policy denies.
const DENIED_IP = '203.0.113.77'

let browser, page
const sandboxes = []

async function rest (method, path, body) {
  return fetch(URL_ + path, {
    method,
    headers: { 'X-API-Key': KEY, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined
  })
}

/** Runs cmd in the sandbox through the SDK; a non-zero exit is returned, not thrown. */
async function sh (sbx, cmd) {
  try {
    return await sbx.commands.run(cmd, { timeoutMs: 60_000 })
  } catch (e) {
    if (e && typeof e.exitCode === 'number') return e
    throw e
  }
}

before(async () => {
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--headless=new', '--disable-gpu', '--disable-dev-shm-usage']
  })
  page = await browser.newPage({ viewport: { width: 1400, height: 900 } })
  page.setDefaultTimeout(60_000)
  page.on('console', (m) => { if (m.type() === 'error') console.log('browser:', m.text()) })
  page.on('pageerror', (e) => console.log('page error:', e.message))
})

after(async () => {
  await browser?.close()
  await Promise.allSettled(sandboxes.map((id) => rest('DELETE', `/sandboxes/${id}`)))
})

test('sandbox page: live activity (process, file, egress), filters, pause, reconnect; lifecycle events', { timeout: SLOW }, async () => {
  const res = await rest('POST', '/v2/sandboxes', { templateID: 'base', timeout: 300, network: { denyOut: ['0.0.0.0/0'] } })
  assert.equal(res.status, 201, await res.clone().text())
  const id = (await res.json()).sandboxID
  sandboxes.push(id)

  // The first stream the page opens ends after one (canned) entry with id 1:
  // the panel must reopen it with Last-Event-ID: 1, and never put the key in a URL.
  const activityURL = `**/sandboxes/${id}/activity*`
  const opened = []
  page.on('request', (r) => {
    if (r.url().includes(`/sandboxes/${id}/activity`)) opened.push({ url: r.url(), headers: r.headers() })
  })
  const canned = { id: 1, time: new Date().toISOString(), type: 'process.start', data: { pid: 1, ppid: 0, path: '/canned', argv: ['canned-entry'] } }
  await page.route(activityURL, (route) => route.fulfill({
    status: 200,
    headers: { 'Content-Type': 'text/event-stream' },
    body: `: activity\n\nid: 1\ndata: ${JSON.stringify(canned)}\n\n`
  }), { times: 1 })

  await page.goto(URL_ + `/console/#/sandboxes/${id}`)
  await page.fill('#api-key', KEY)
  await page.click('#login')
  await page.locator('#tab-activity').click()
  await page.locator('#activity-table tr[data-id="1"]', { hasText: 'canned-entry' }).waitFor()
  await page.locator('#activity-state', { hasText: 'live' }).waitFor()
  assert.ok(opened.length >= 2, `the stream was reopened (${opened.length} requests)`)
  assert.equal(opened[0].headers.accept, 'text/event-stream')
  assert.equal(opened[0].headers['x-api-key'], KEY)
  assert.equal(opened[0].headers['last-event-id'], undefined)
  assert.equal(opened[1].headers['last-event-id'], '1', 'reconnected with the last id seen')
  for (const o of opened) assert.ok(!o.url.includes(KEY), 'the API key is never in a URL')

  // Through the SDK: a process that writes a file, and a connection the policy denies.
  const sbx = await Sandbox.connect(id, { apiKey: KEY, apiUrl: URL_, sandboxUrl: URL_, requestTimeoutMs: 60_000 })
  const t0 = Date.now()
  assert.equal((await sh(sbx, "sh -c 'echo hi > /home/user/f'")).exitCode, 0)
  const curl = await sh(sbx, `curl -sS -m 3 http://${DENIED_IP}/`)
  assert.notEqual(curl.exitCode, 0, 'the denied connection failed in the sandbox')

  const fileRow = page.locator('#activity-table tr[data-type^="file."]', { hasText: '/home/user/f' }).first()
  const procRow = page.locator('#activity-table tr[data-type="process.start"]', { hasText: 'echo hi > /home/user/f' }).first()
  const egressRow = page.locator('#activity-table tr[data-type="egress.connect"]', { hasText: DENIED_IP }).first()
  await Promise.all([fileRow.waitFor(), procRow.waitFor(), egressRow.waitFor()])
  console.log(`entries shown ${Date.now() - t0} ms after the first command started`)
  assert.match(await egressRow.innerText(), /deni|drop|block/i, 'the verdict is shown')
  assert.match(await egressRow.getAttribute('class'), /denied/)
  await page.screenshot({ path: join(ART, 'activity.png'), fullPage: true })

  // Type filters act on the view.
  await page.uncheck('#activity-show-process')
  await procRow.waitFor({ state: 'detached' })
  assert.equal(await page.locator('#activity-table tr[data-type^="process."]').count(), 0)
  assert.ok(await fileRow.isVisible(), 'file entries still shown')
  await page.uncheck('#activity-show-file')
  await page.uncheck('#activity-show-egress')
  await page.locator('#activity-empty').waitFor()
  for (const g of ['process', 'file', 'egress']) await page.check('#activity-show-' + g)
  await procRow.waitFor()

  // Pause holds new entries back; resume shows them.
  await page.click('#activity-pause')
  await sh(sbx, 'touch /home/user/while-paused')
  await page.locator('#activity-state', { hasText: /paused \([1-9]\d* new\)/ }).waitFor()
  assert.equal(await page.locator('#activity-table tr', { hasText: 'while-paused' }).count(), 0, 'nothing new while paused')
  await page.click('#activity-pause')
  await page.locator('#activity-table tr', { hasText: 'while-paused' }).first().waitFor()
  const ids = await page.locator('#activity-table tbody tr').evaluateAll((rows) => rows.map((r) => Number(r.dataset.id)).filter((n) => n > 0))
  assert.equal(new Set(ids).size, ids.length, 'no entry shown twice')

  // The lifecycle events: created.
  await page.locator('#tab-events').click()
  await page.locator('#lifecycle tr[data-event="sandbox.lifecycle.created"]').waitFor()
  await page.screenshot({ path: join(ART, 'lifecycle.png'), fullPage: true })
})
