// Browser tests of the web console: headless Debian chromium driven by
// playwright-core against the test daemon (scripts/test.sh sets
// AIRLOCK_E2E_URL and AIRLOCK_E2E_API_KEY). Screenshots of every page go to
// $AIRLOCK_TEST_ARTIFACTS (default /tmp/airlock-console-artifacts).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { chromium } from 'playwright-core'

const URL_ = process.env.AIRLOCK_E2E_URL
const KEY = process.env.AIRLOCK_E2E_API_KEY
if (!URL_ || !KEY) throw new Error('AIRLOCK_E2E_URL and AIRLOCK_E2E_API_KEY must be set (scripts/test.sh does this)')
const ART = process.env.AIRLOCK_TEST_ARTIFACTS || '/tmp/airlock-console-artifacts'
mkdirSync(ART, { recursive: true })
const CHROMIUM = process.env.AIRLOCK_CHROMIUM || '/usr/bin/chromium'
const SLOW = 180_000

let browser, page
const created = []
const consoleErrors = []

async function shot (name) {
  await page.screenshot({ path: join(ART, `${name}.png`), fullPage: true })
}

async function rest (method, path) {
  return fetch(URL_ + path, { method, headers: { 'X-API-Key': KEY } })
}

/** The text xterm.js renders (its DOM renderer's rows). */
async function terminalText () {
  return page.locator('#terminal .xterm-rows').innerText()
}

before(async () => {
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--headless=new', '--disable-gpu', '--disable-dev-shm-usage']
  })
  page = await browser.newPage({ viewport: { width: 1400, height: 900 } })
  page.setDefaultTimeout(60_000)
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()) })
  page.on('pageerror', (e) => consoleErrors.push(String(e)))
})

after(async () => {
  await browser?.close()
  await Promise.allSettled(created.map((id) => rest('DELETE', `/sandboxes/${id}`)))
})

test('a browser opening / lands on the console login; a wrong key is refused, the right one logs in', { timeout: SLOW }, async () => {
  await page.goto(URL_ + '/')
  assert.match(page.url(), /\/console\/$/)
  await page.fill('#api-key', 'e2b_wrong')
  await page.click('#login')
  await page.locator('#login-error').waitFor()
  assert.match(await page.locator('#login-error').innerText(), /not valid/)
  await shot('01-login')
  await page.fill('#api-key', KEY)
  // A single host has no nodes API: no Nodes tab (cluster.test.mjs has the cluster's).
  const probe = page.waitForResponse((r) => r.url().endsWith('/airlock/v1/nodes'))
  await page.click('#login')
  assert.equal((await probe).status(), 404)
  await page.locator('#stat-running').waitFor()
  await page.waitForSelector('.chart canvas')
  assert.equal(await page.locator('#nav-nodes').count(), 0, 'no Nodes tab on a single host')
  assert.equal(await page.locator('#overview-node').count(), 0)
  await shot('02-overview')
})

let sandboxId

test('playground: create a sandbox; matplotlib → <img>, print streams, traceback, DataFrame table, Markdown, SVG, JSON, Bash, JS', { timeout: 6 * 60_000 }, async () => {
  await page.click('#nav-playground')
  await page.locator('#template').waitFor()
  await page.waitForFunction(() => [...document.querySelectorAll('#template option')].some((o) => o.value === 'code-interpreter-v1'))
  await page.selectOption('#template', 'code-interpreter-v1')
  await page.click('#start-sandbox')
  const link = page.locator('#playground-sandbox code')
  await link.waitFor({ timeout: SLOW })
  sandboxId = (await link.innerText()).trim()
  created.push(sandboxId)
  assert.match(sandboxId, /^[a-z0-9]+$/)

  // Cell 0 is the matplotlib example.
  await page.locator('.cell[data-cell="0"] button.run').click()
  const img = page.locator('.cell[data-cell="0"] img.result-img')
  await img.waitFor({ timeout: SLOW })
  assert.match(await img.getAttribute('src'), /^data:image\/png;base64,iVBOR/)
  assert.ok(await img.evaluate((el) => el.complete && el.naturalWidth > 100), 'the PNG decodes')

  // Streaming: the first line shows while the cell still runs.
  await page.click('#add-cell')
  const c1 = page.locator('.cell[data-cell="1"]')
  await c1.locator('textarea').fill('import time\nfor i in range(4):\n    print("tick", i, flush=True)\n    time.sleep(1.5)')
  await c1.locator('button.run').click()
  await c1.locator('pre.stream', { hasText: 'tick 0' }).waitFor({ timeout: SLOW })
  assert.equal(await c1.locator('button.run').innerText(), 'Running…', 'tick 0 arrived before the cell finished')
  await c1.locator('pre.stream', { hasText: 'tick 3' }).waitFor({ timeout: SLOW })
  await page.waitForFunction(() => document.querySelector('.cell[data-cell="1"] button.run').textContent === 'Run')

  // An error with its traceback.
  await page.click('#add-cell')
  const c2 = page.locator('.cell[data-cell="2"]')
  await c2.locator('textarea').fill('def f():\n    return 1/0\nf()')
  await c2.locator('button.run').click()
  await c2.locator('pre.cell-error').waitFor({ timeout: SLOW })
  const errText = await c2.locator('pre.cell-error').innerText()
  assert.match(errText, /ZeroDivisionError/)
  assert.match(errText, /f\(\)/, 'the traceback names the frames')

  // A DataFrame: an HTML table, rendered in a script-less sandboxed iframe.
  await page.click('#add-cell')
  const c3 = page.locator('.cell[data-cell="3"]')
  await c3.locator('textarea').fill('import pandas as pd\npd.DataFrame({"animal": ["cat", "dog"], "legs": [4, 4]})')
  await c3.locator('button.run').click()
  const frame = c3.locator('iframe.result-html')
  await frame.waitFor({ timeout: SLOW })
  assert.equal(await frame.getAttribute('sandbox'), 'allow-same-origin', 'HTML results cannot run scripts')
  const cellText = await c3.frameLocator('iframe.result-html').locator('table').innerText()
  assert.match(cellText, /animal[\s\S]*cat[\s\S]*dog/)

  // Hostile HTML from the sandbox renders, but its scripts and handlers do not run.
  await c3.locator('textarea').fill([
    'from IPython.display import HTML',
    'HTML(\'<b id="bold">bold</b><script>parent.document.title = "pwned"; parent.localStorage.pwned = 1</script>\'',
    '     \'<img src="x" onerror="parent.document.title = \\\'pwned2\\\'">\')'
  ].join('\n'))
  await c3.locator('button.run').click()
  await c3.frameLocator('iframe.result-html').locator('#bold').waitFor({ timeout: SLOW })
  await new Promise((resolve) => setTimeout(resolve, 500))
  assert.equal(await page.title(), 'Airlock console', 'scripts in HTML results did not run')
  assert.equal(await page.evaluate(() => localStorage.getItem('pwned')), null)

  // Markdown, SVG and JSON display results.
  await page.click('#add-cell')
  const c5 = page.locator('.cell[data-cell="4"]')
  await c5.locator('textarea').fill([
    'from IPython.display import display, Markdown, SVG, JSON',
    'display(Markdown("# Title\\n\\n*hello* **markdown**"))',
    'display(SVG(\'<svg xmlns="http://www.w3.org/2000/svg" width="60" height="20"><rect width="60" height="20" fill="teal"/></svg>\'))',
    'display(JSON({"answer": 42}))'
  ].join('\n'))
  await c5.locator('button.run').click()
  await c5.locator('iframe.result-markdown').waitFor({ timeout: SLOW })
  assert.equal(await c5.frameLocator('iframe.result-markdown').locator('h1').innerText(), 'Title')
  assert.match(await c5.locator('img.result-img').getAttribute('src'), /^data:image\/svg\+xml/)
  await c5.locator('pre.result-json', { hasText: '"answer": 42' }).waitFor({ timeout: SLOW })

  // JavaScript and Bash cells.
  await page.click('#add-cell')
  const c4 = page.locator('.cell[data-cell="5"]')
  await c4.locator('select.cell-lang').selectOption('bash')
  await c4.locator('textarea').fill('echo "bash says $((6*7))"')
  await c4.locator('button.run').click()
  await c4.locator('pre.stream', { hasText: 'bash says 42' }).waitFor({ timeout: SLOW })
  await page.click('#add-cell')
  const c6 = page.locator('.cell[data-cell="6"]')
  await c6.locator('select.cell-lang').selectOption('js')
  await c6.locator('textarea').fill('const xs = [1, 2, 3]\nconsole.log("js sum", xs.reduce((a, b) => a + b))')
  await c6.locator('button.run').click()
  await c6.locator('pre.stream', { hasText: 'js sum 6' }).waitFor({ timeout: SLOW })
  await shot('03-playground')
})

test('sandbox page: the terminal runs ls, files upload (input and drag and drop) and list', { timeout: 5 * 60_000 }, async () => {
  assert.ok(sandboxId, 'the playground test created a sandbox')
  await page.click('#playground-sandbox a')
  await page.locator('#terminal-status', { hasText: 'connected' }).waitFor({ timeout: SLOW })
  await page.locator('#terminal .xterm-rows').waitFor()
  await page.click('#terminal')
  // The computed names and numbers appear only in the output, not in the echoed command line.
  await page.keyboard.type('cd /home/user && touch "term-$((6*7)).txt" && ls -a && echo MARK-$((40+2))\n')
  await page.waitForFunction(() => document.querySelector('#terminal .xterm-rows')?.innerText.includes('MARK-42'), null, { timeout: SLOW })
  const text = await terminalText()
  assert.match(text, /term-42\.txt/, `ls output shows the new file:\n${text}`)
  assert.match(text, /\.bashrc/, 'ls -a lists the home directory')
  await shot('04-sandbox-terminal')

  await page.click('#tab-files')
  await page.locator('#files-table').waitFor({ timeout: SLOW })
  await page.locator('tr[data-file="term-42.txt"]').waitFor()
  await page.setInputFiles('#files-upload', { name: 'hello-console.txt', mimeType: 'text/plain', buffer: Buffer.from('hello from the console test\n') })
  const row = page.locator('tr[data-file="hello-console.txt"]')
  await row.waitFor({ timeout: SLOW })
  assert.match(await row.innerText(), /28 B/)

  // Drag and drop: a synthetic drop event with a DataTransfer holding a file.
  await page.evaluate(() => {
    const dt = new DataTransfer()
    dt.items.add(new File(['dropped bytes'], 'dropped.bin'))
    const target = document.querySelector('#files')
    target.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }))
    target.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }))
  })
  await page.locator('tr[data-file="dropped.bin"]').waitFor({ timeout: SLOW })
  await shot('05-sandbox-files')

  // A path typed into the path box survives the page's periodic refresh (every 5 s) and is
  // applied on Enter.
  await page.fill('#files-path', '/etc')
  await page.waitForTimeout(5_500)
  assert.equal(await page.inputValue('#files-path'), '/etc', 'a refresh does not reset the typed path')
  await page.press('#files-path', 'Enter')
  await page.locator('tr[data-file="passwd"]').waitFor({ timeout: SLOW })
  await page.fill('#files-path', '/home/user')
  await page.press('#files-path', 'Enter')
  await page.locator('tr[data-file="dropped.bin"]').waitFor({ timeout: SLOW })

  // The upload really is in the sandbox: cat it in the terminal.
  await page.click('#tab-terminal')
  await page.locator('#terminal-status', { hasText: 'connected' }).waitFor({ timeout: SLOW })
  await page.click('#terminal')
  await page.keyboard.type('cat /home/user/hello-console.txt /home/user/dropped.bin; echo\n')
  await page.waitForFunction(() => document.querySelector('#terminal .xterm-rows')?.innerText.includes('dropped bytes'), null, { timeout: SLOW })
  assert.match(await terminalText(), /hello from the console test/)

  await page.click('#tab-logs')
  await page.locator('#logs').waitFor()
  await shot('06-sandbox-logs')
})

test('the terminal socket refuses a wrong key', { timeout: SLOW }, async () => {
  const res = await page.evaluate(async (id) => new Promise((resolve) => {
    const ws = new WebSocket(`ws://${location.host}/console/api/sandboxes/${id}/pty`)
    ws.onopen = () => ws.send(JSON.stringify({ type: 'auth', key: 'e2b_wrong' }))
    let got = 0
    ws.onmessage = () => { got++ }
    ws.onclose = (ev) => resolve({ code: ev.code, reason: ev.reason, got })
  }), sandboxId)
  assert.deepEqual(res, { code: 4401, reason: 'Invalid API key', got: 0 })
})

test('templates page lists templates with sizes and builds one from a pasted Dockerfile with a streamed log', { timeout: 10 * 60_000 }, async () => {
  await page.click('#nav-templates')
  const row = page.locator('tr[data-template="code-interpreter-v1"]')
  await row.waitFor()
  assert.match(await row.innerText(), /\d+(\.\d)? (MiB|GiB)/)
  const name = `console-e2e-${Date.now().toString(36)}`
  try {
    await page.fill('#build-name', name)
    await page.fill('#build-dockerfile', 'FROM base\nENV GREETING=hello-console\nWORKDIR /srv/console\n')
    await page.click('#build-start')
    await page.locator('#build-result').waitFor({ timeout: 9 * 60_000 })
    const result = await page.locator('#build-result').innerText()
    assert.match(result, new RegExp(`^built ${name}`), result)
    assert.match(await page.locator('#build-log').innerText(), /WORKDIR/, 'the log names the steps')
    await page.locator(`tr[data-template="${name}"]`).waitFor()
    await shot('07-templates')
  } finally {
    await rest('DELETE', `/airlock/v1/templates/${name}`)
  }
})

/** A JSON REST call; resolves {status, body}. */
async function restJSON (method, path, body) {
  const res = await fetch(URL_ + path, {
    method,
    headers: { 'X-API-Key': KEY, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body)
  })
  const text = await res.text()
  return { status: res.status, body: text ? JSON.parse(text) : undefined }
}

test('templates page shows a template built with E2B\'s build API once, with its tags, its builds and a build\'s log', { timeout: 10 * 60_000 }, async () => {
  const name = `console-sdk-${Date.now().toString(36)}`
  const token = Date.now().toString(36)
  try {
    // The SDK's Template.build flow: request (name:tag + tags), start, poll.
    const req = await restJSON('POST', '/v3/templates', { name: `${name}:v1`, tags: ['stable'] })
    assert.equal(req.status, 202, JSON.stringify(req.body))
    const buildID = req.body.buildID
    const start = await restJSON('POST', `/v2/templates/${name}/builds/${buildID}`, {
      fromTemplate: 'base',
      steps: [{ type: 'ENV', args: ['CONSOLE_SDK', token] }, { type: 'RUN', args: [`echo console-sdk-${token}`] }]
    })
    assert.equal(start.status, 202, JSON.stringify(start.body))
    let st
    for (let i = 0; i < 600; i++) {
      st = await restJSON('GET', `/templates/${name}/builds/${buildID}/status`)
      if (st.body.status === 'ready' || st.body.status === 'error') break
      await new Promise((resolve) => setTimeout(resolve, 500))
    }
    assert.equal(st.body.status, 'ready', JSON.stringify(st.body))

    await page.click('#nav-overview')
    await page.click('#nav-templates')
    const row = page.locator(`tr[data-template="${name}"]`)
    await row.waitFor()
    assert.equal(await page.locator(`tr[data-template^="${name}:"]`).count(), 0, 'tags are not listed as templates')
    assert.deepEqual((await row.locator('.template-tags .tag').allInnerTexts()).sort(), ['stable', 'v1'])

    await row.locator('.show-builds').click()
    const build = page.locator(`tr[data-build="${buildID}"]`)
    await build.waitFor()
    assert.equal(await build.locator('.build-status').innerText(), 'ready')
    assert.match(await build.innerText(), /v1[\s\S]*stable/)
    await build.locator('.show-build-log').click()
    const log = page.locator(`pre[data-build-log="${buildID}"]`)
    await log.waitFor()
    const text = await log.innerText()
    assert.match(text, new RegExp(`RUN echo console-sdk-${token}`), text)
    assert.match(text, /built \(tags v1, stable\)/, text)
    await shot('07b-template-builds')
  } finally {
    await restJSON('DELETE', '/templates/tags', { name, tags: ['v1', 'stable'] })
  }
})

test('sandboxes table: filter by metadata, pause and resume a sandbox', { timeout: 5 * 60_000 }, async () => {
  const tag = `console-${Date.now().toString(36)}`
  const res = await fetch(URL_ + '/sandboxes', {
    method: 'POST',
    headers: { 'X-API-Key': KEY, 'Content-Type': 'application/json' },
    body: JSON.stringify({ templateID: 'base', timeout: 300, metadata: { suite: tag } })
  })
  assert.equal(res.status, 201, await res.clone().text())
  const id = (await res.json()).sandboxID
  created.push(id)
  await page.click('#nav-sandboxes')
  await page.fill('#filter-metadata', `suite=${tag}`)
  // The table refreshes every 3 s; a refresh must not wipe a filter that is still being typed.
  await page.waitForTimeout(3_500)
  assert.equal(await page.inputValue('#filter-metadata'), `suite=${tag}`, 'a refresh does not reset the typed filter')
  await page.press('#filter-metadata', 'Enter')
  const row = page.locator(`tr[data-sandbox="${id}"]`)
  // The filter applies on the next load: wait for a table of exactly the tagged sandbox.
  await page.waitForFunction((id) => {
    const rows = document.querySelectorAll('#sandboxes tbody tr')
    return rows.length === 1 && rows[0].dataset.sandbox === id
  }, id)
  assert.equal(await page.locator('#sandboxes th', { hasText: 'Node' }).count(), 0, 'no Node column on a single host')
  await row.locator('button[data-action="pause"]').click()
  await row.locator('.badge.paused').waitFor({ timeout: SLOW })
  await page.selectOption('#filter-state', 'running')
  await page.locator('#no-sandboxes').waitFor()
  await page.selectOption('#filter-state', 'paused')
  await row.waitFor()
  await shot('08a-sandboxes-paused')
  await row.locator('button[data-action="resume"]').click()
  await page.selectOption('#filter-state', '')
  await row.locator('.badge.running').waitFor({ timeout: SLOW })
  await row.locator('button[data-action="kill"]').click()
  await row.waitFor({ state: 'detached' })
})

test('sandboxes table: extend, then kill the playground sandbox', { timeout: SLOW }, async () => {
  await page.click('#nav-overview') // a fresh table, without the previous test's filters
  await page.click('#nav-sandboxes')
  const row = page.locator(`tr[data-sandbox="${sandboxId}"]`)
  await row.waitFor()
  const before = await (await rest('GET', `/sandboxes/${sandboxId}`)).json()
  await row.locator('button[data-action="extend"]').click()
  await page.locator('.info', { hasText: `extend ${sandboxId}: done` }).waitFor()
  const afterExtend = await (await rest('GET', `/sandboxes/${sandboxId}`)).json()
  assert.ok(new Date(afterExtend.endAt) - new Date(before.endAt) > 200_000, `endAt moved by ~5 min: ${before.endAt} → ${afterExtend.endAt}`)
  await shot('08-sandboxes')
  await row.locator('button[data-action="kill"]').click()
  await row.waitFor({ state: 'detached' })
  assert.equal((await rest('GET', `/sandboxes/${sandboxId}`)).status, 404)
  await shot('09-sandboxes-after-kill')

  // The overview counts the playground's create and its latency.
  await page.click('#nav-overview')
  const creates = page.locator('.stat', { hasText: 'Creates (last hour)' }).locator('.stat-value')
  await creates.waitFor()
  assert.ok(Number(await creates.innerText()) >= 1, 'the overview counted at least the playground create')
  assert.match(await page.locator('.stat', { hasText: 'Create latency' }).innerText(), /\d+\.\d\d s \/ \d+\.\d\d s/)
  await shot('10-overview-after')
  // Expected: the wrong-key login (401), the hostile HTML's missing image (404), no logs
  // endpoint yet (501), and the blocked scripts of that HTML.
  const expected = /Failed to load resource.*(401|404|501)|Blocked script execution in 'about:srcdoc'/
  assert.deepEqual(consoleErrors.filter((e) => !expected.test(e)), [], 'no other errors in the browser console')
})
