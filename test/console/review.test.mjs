// Second security review (docs/security/review-2026-11-28-second-pass.md), in
// the browser: a file a sandbox wrote, opened through a signed /files URL on
// the console's own origin, must not run script there (R2-1). Without the
// proxy's `Content-Security-Policy: sandbox`, the page's script reads the API
// key the console keeps in the tab's sessionStorage.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { chromium } from 'playwright-core'

const URL_ = process.env.AIRLOCK_E2E_URL
const KEY = process.env.AIRLOCK_E2E_API_KEY
if (!URL_ || !KEY) throw new Error('AIRLOCK_E2E_URL and AIRLOCK_E2E_API_KEY must be set (scripts/test.sh does this)')
const CHROMIUM = process.env.AIRLOCK_CHROMIUM || '/usr/bin/chromium'

let browser, page, sandbox

before(async () => {
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--headless=new', '--disable-gpu', '--disable-dev-shm-usage']
  })
  page = await browser.newPage()
  page.setDefaultTimeout(60_000)
})

after(async () => {
  await browser?.close()
  if (sandbox) await fetch(`${URL_}/sandboxes/${sandbox.sandboxID}`, { method: 'DELETE', headers: { 'X-API-Key': KEY } })
})

/** E2B's /files URL signature (internal/guest/sign.go). */
function sign (path, op, user, token, exp) {
  return 'v1_' + createHash('sha256').update(`${path}:${op}:${user}:${token}:${exp}`).digest('base64').replace(/=+$/, '')
}

test('R2-1: a sandbox\'s HTML behind a signed /files URL cannot read the console\'s API key', { timeout: 180_000 }, async () => {
  const res = await fetch(`${URL_}/sandboxes`, {
    method: 'POST',
    headers: { 'X-API-Key': KEY, 'Content-Type': 'application/json' },
    body: JSON.stringify({ templateID: 'base', timeout: 120, secure: true })
  })
  assert.equal(res.status, 201, await res.clone().text())
  sandbox = await res.json()
  assert.ok(sandbox.envdAccessToken, 'a secure sandbox has an access token')

  // What untrusted code in the sandbox writes.
  const path = '/home/user/r21-report.html'
  const html = '<p id="shown">report</p><script>document.title = "stolen:" + sessionStorage.getItem("airlock-api-key")</script>'
  const up = await fetch(`${URL_}/files?path=${encodeURIComponent(path)}&username=user`, {
    method: 'POST',
    headers: { 'E2b-Sandbox-Id': sandbox.sandboxID, 'X-Access-Token': sandbox.envdAccessToken, 'Content-Type': 'application/octet-stream' },
    body: html
  })
  assert.equal(up.status, 200, await up.clone().text())

  // The operator is logged in to the console in this tab...
  await page.goto(URL_ + '/console/')
  await page.fill('#api-key', KEY)
  await page.click('#login')
  await page.locator('#stat-running').waitFor()
  assert.equal(await page.evaluate(() => sessionStorage.getItem('airlock-api-key')), KEY)

  // ...and opens a download link the application handed out (E2B's downloadUrl).
  const exp = Math.floor(Date.now() / 1000) + 600
  const q = new URLSearchParams({ path, username: 'user', signature: sign(path, 'read', 'user', sandbox.envdAccessToken, exp), signature_expiration: String(exp) })
  const nav = await page.goto(`${URL_}/files?${q}`)
  assert.equal(nav.status(), 200)
  assert.equal(await page.locator('#shown').innerText(), 'report', 'the file is still shown')
  const title = await page.title()
  assert.ok(!title.includes(KEY), `the sandbox's script ran on the console's origin and read the API key (title ${JSON.stringify(title)})`)
  assert.equal(title, '')
  assert.match(nav.headers()['content-security-policy'] || '', /^sandbox/, 'the answer carries a CSP sandbox')
})
