// The console's volumes page (issue 27) in the browser: the list with size
// limit, use and the sandboxes that mount each volume; create and delete; and
// the file browser (list, upload, download, make a folder, delete), through
// the console's own login (the API key, then each volume's content token).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync, readFileSync, writeFileSync, mkdtempSync } from 'node:fs'
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import { chromium } from 'playwright-core'

const URL_ = process.env.AIRLOCK_E2E_URL
const KEY = process.env.AIRLOCK_E2E_API_KEY
if (!URL_ || !KEY) throw new Error('AIRLOCK_E2E_URL and AIRLOCK_E2E_API_KEY must be set (scripts/test.sh does this)')
const ART = process.env.AIRLOCK_TEST_ARTIFACTS || '/tmp/airlock-console-artifacts'
mkdirSync(ART, { recursive: true })
const CHROMIUM = process.env.AIRLOCK_CHROMIUM || '/usr/bin/chromium'
const SLOW = 180_000

let browser, page
const sandboxes = []
const name = `console-vol-${Date.now().toString(36)}`
let volumeID

async function rest (method, path, body) {
  return fetch(URL_ + path, {
    method,
    headers: { 'X-API-Key': KEY, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined
  })
}

/** GET /volumes/{id} (a fresh content token) and a content API call with it. */
async function contentGet (op, path) {
  const v = await (await rest('GET', `/volumes/${volumeID}`)).json()
  return fetch(`${URL_}/volumecontent/${volumeID}/${op}?path=${encodeURIComponent(path)}`, { headers: { Authorization: `Bearer ${v.token}` } })
}

before(async () => {
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--headless=new', '--disable-gpu', '--disable-dev-shm-usage']
  })
  page = await browser.newPage({ viewport: { width: 1400, height: 900 }, acceptDownloads: true })
  page.setDefaultTimeout(60_000)
  // The page asks for a folder name (prompt) and confirms deletes.
  page.on('dialog', (d) => d.type() === 'prompt' ? d.accept('made-here') : d.accept())
})

after(async () => {
  await browser?.close()
  await Promise.allSettled(sandboxes.map((id) => rest('DELETE', `/sandboxes/${id}`)))
  if (volumeID) await rest('DELETE', `/volumes/${volumeID}`).catch(() => {})
})

test('volumes page: create, size and use, mounted by, file browser, delete', { timeout: SLOW }, async () => {
  await page.goto(URL_ + '/console/#/volumes')
  await page.fill('#api-key', KEY)
  await page.click('#login')
  await page.locator('#nav-volumes').waitFor()
  await page.click('#nav-volumes')
  await page.locator('#volume-create').waitFor()

  // Create through the form, with a size limit.
  await page.fill('#volume-name', name)
  await page.fill('#volume-size', '24')
  await page.click('#volume-create-button')
  const row = page.locator(`#volumes tr[data-volume="${name}"]`)
  await row.waitFor()
  volumeID = (await row.locator('code').first().innerText()).trim()
  assert.match(volumeID, /^[0-9a-f-]{36}$/)
  assert.equal((await row.locator('.volume-size').innerText()).trim(), '24.0 MiB')
  assert.match(await row.locator('.volume-used').innerText(), /\d/, 'the use is shown')
  assert.equal((await row.locator('.volume-mounted-by').innerText()).trim(), '–')

  // A bad name: the API's 400 is shown.
  await page.fill('#volume-name', 'no spaces')
  await page.click('#volume-create-button')
  assert.match(await page.locator('#volumes-error').innerText(), /Invalid volume name/)

  // A sandbox that mounts it shows in "Mounted by" (after a refresh).
  const res = await rest('POST', '/v2/sandboxes', { templateID: 'base', timeout: 300, volumeMounts: [{ name, path: '/mnt/v' }] })
  assert.equal(res.status, 201, await res.clone().text())
  const sb = (await res.json()).sandboxID
  sandboxes.push(sb)
  await page.getByRole('button', { name: 'Refresh' }).first().click()
  await row.locator('.volume-mounted-by', { hasText: sb }).waitFor()

  // The file browser: upload, list, download, make a folder, delete.
  await row.locator('.volume-browse').click()
  await page.locator('#volume-files-table').waitFor()
  const dir = mkdtempSync(join(tmpdir(), 'airlock-console-vol-'))
  const local = join(dir, 'notes.txt')
  const body = 'uploaded from the console\n'.repeat(100)
  writeFileSync(local, body)
  await page.setInputFiles('#volume-upload', local)
  const fileRow = page.locator('#volume-files-table tr[data-file="notes.txt"]')
  await fileRow.waitFor()
  assert.equal(await (await contentGet('file', '/notes.txt')).text(), body, 'the upload is in the volume')

  const [dl] = await Promise.all([page.waitForEvent('download'), fileRow.locator('.volume-download').click()])
  assert.equal(dl.suggestedFilename(), 'notes.txt')
  assert.equal(readFileSync(await dl.path(), 'utf8'), body)

  await page.click('#volume-mkdir')
  const dirRow = page.locator('#volume-files-table tr[data-file="made-here"]')
  await dirRow.waitFor()
  await dirRow.locator('.volume-dir').click()
  await page.locator('#volume-files-path', { hasText: '/made-here' }).waitFor()
  await page.setInputFiles('#volume-upload', local)
  await page.locator('#volume-files-table tr[data-file="notes.txt"]').waitFor()
  assert.equal((await contentGet('path', '/made-here/notes.txt')).status, 200)
  await page.screenshot({ path: join(ART, 'volumes-files.png'), fullPage: true })
  await page.getByRole('button', { name: 'Up' }).click()
  await page.locator('#volume-files-path', { hasText: /^\/$/ }).waitFor()
  await fileRow.locator('.volume-file-delete').click()
  await fileRow.waitFor({ state: 'detached' })
  assert.equal((await contentGet('path', '/notes.txt')).status, 404, 'the delete reached the volume')

  // The use went up with the files; the row shows it.
  await page.getByRole('button', { name: 'Refresh' }).first().click()
  assert.match(await row.locator('.volume-used').innerText(), /KiB|MiB/)

  // Delete the volume (mounted: the page warns, the API allows it).
  await row.locator('.volume-delete').click()
  await row.waitFor({ state: 'detached' })
  assert.equal((await rest('GET', `/volumes/${volumeID}`)).status, 404)
  volumeID = ''
})
