// The console's approvals tab (issue 28: "the console shows a sandbox's
// pending approvals, and a person can answer them there") in the browser,
// against the real hold: a sandbox created by REST with network.approval
// {stream: true} and denyOut 0.0.0.0/0 curls addresses in a network
// namespace this test owns (the stand-in internet, <AIRLOCK_E2E_EXT_NET>.16/29,
// which the test daemon opens with --deny-out-except <ext>.0/27); each held
// connection shows as a pending question on the sandbox's page, and the
// person's click is the answer: Allow → curl connects, Deny → refused at
// once, Allow remembered for the sandbox's life → a repeat is not asked;
// one answered elsewhere (REST) and one left past its deadline leave the list.
// A refused answer (a remember the API does not take) is shown; the stream
// is reopened after a drop; a sandbox without the hook says so and the
// console turns the hook on and off, keeping the rest of its policy.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { randomBytes } from 'node:crypto'
import { chromium } from 'playwright-core'
import { Sandbox } from 'e2b'

const URL_ = process.env.AIRLOCK_E2E_URL
const KEY = process.env.AIRLOCK_E2E_API_KEY
if (!URL_ || !KEY) throw new Error('AIRLOCK_E2E_URL and AIRLOCK_E2E_API_KEY must be set (scripts/test.sh does this)')
const ART = process.env.AIRLOCK_TEST_ARTIFACTS || '/tmp/airlock-console-artifacts'
mkdirSync(ART, { recursive: true })
const CHROMIUM = process.env.AIRLOCK_CHROMIUM || '/usr/bin/chromium'
const SLOW = 300_000
const HOLD_MS = 60_000 // the hook's deadline: far longer than a person's click here

const ext = process.env.AIRLOCK_E2E_EXT_NET ?? '10.78.255'
const tag = randomBytes(3).toString('hex')
// Interface names start with no daemon's --net-prefix (a daemon takes those as its veths).
const ns = `con-ap-${tag}`
const hostIf = `cnsa${tag}`
const nsIf = `cnsb${tag}`
const hostIP = `${ext}.17`
const allowIP = `${ext}.18`
const denyIP = `${ext}.19`
const memoIP = `${ext}.20`
// One address per step: an answer "once" stays in the kernel's sets for 2-3 s
// (SYN retransmits meet it), so a repeat within that window is not asked.
const elsewhereIP = `${ext}.21`
const muteIP = `${ext}.22`
const DESTS = [allowIP, denyIP, memoIP, elsewhereIP, muteIP]
const PORT = 8089
const ip = (...args) => execFileSync('ip', args, { stdio: 'pipe' })

let browser, page, server
const sandboxes = []

async function rest (method, path, body) {
  return fetch(URL_ + path, {
    method,
    headers: { 'X-API-Key': KEY, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined
  })
}

/**
 * Opens a console page. Chromium fails loads in flight with
 * ERR_NETWORK_CHANGED when the host's interfaces change (this test's veth,
 * other suites' sandboxes): a page whose bundle did not load is reloaded.
 */
async function open (path) {
  for (let i = 0; ; i++) {
    await page.goto(URL_ + path)
    try {
      await page.locator('#api-key, #tab-approvals').first().waitFor({ timeout: 30_000 })
      return
    } catch (e) {
      if (i >= 3) throw e
      console.log(`reloading ${path}: ${e.message.split('\n')[0]}`)
    }
  }
}

async function create (network) {
  const res = await rest('POST', '/v2/sandboxes', { templateID: 'base', timeout: 600, network })
  assert.equal(res.status, 201, await res.clone().text())
  const id = (await res.json()).sandboxID
  sandboxes.push(id)
  return id
}

/**
 * curl from inside the sandbox: {rc, secs, out}. It blocks while the
 * connection is held, so callers start it and answer in the page meanwhile.
 */
async function curl (sbx, addr, maxSecs = 90) {
  const cmd = `curl -sS -m ${maxSecs} -o /tmp/out -w '%{time_total}' http://${addr}:${PORT}/ 2>/tmp/err; rc=$?; echo " $rc"; cat /tmp/out /tmp/err 2>/dev/null; true`
  const r = await sbx.commands.run(cmd, { timeoutMs: (maxSecs + 60) * 1000 })
  const [secs, rc] = r.stdout.trim().split('\n')[0].trim().split(/\s+/)
  return { rc: Number(rc), secs: Number(secs), out: r.stdout }
}

before(async () => {
  ip('netns', 'add', ns)
  ip('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf)
  ip('link', 'set', nsIf, 'netns', ns)
  ip('addr', 'add', `${hostIP}/29`, 'dev', hostIf)
  ip('link', 'set', hostIf, 'up')
  for (const a of DESTS) ip('-n', ns, 'addr', 'add', `${a}/29`, 'dev', nsIf)
  ip('-n', ns, 'link', 'set', nsIf, 'up')
  ip('-n', ns, 'link', 'set', 'lo', 'up')
  ip('-n', ns, 'route', 'add', 'default', 'via', hostIP)
  server = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', `
    const http = require('http')
    let n = 0
    for (const ip of ${JSON.stringify(DESTS)}) {
      http.createServer((q, s) => s.end('hello from ' + ip + '\\n')).listen(${PORT}, ip, () => { if (++n === ${DESTS.length}) console.log('ready') })
    }`], { stdio: ['ignore', 'pipe', 'inherit'] })
  await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('the servers in the test namespace did not start')), 15_000)
    createInterface({ input: server.stdout }).on('line', (l) => { if (l === 'ready') { clearTimeout(t); resolve() } })
  })

  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--headless=new', '--disable-gpu', '--disable-dev-shm-usage']
  })
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 } })
  page.setDefaultTimeout(60_000)
  page.on('console', (m) => { if (m.type() === 'error') console.log('browser:', m.text()) })
  page.on('pageerror', (e) => console.log('page error:', e.message))
}, { timeout: SLOW })

after(async () => {
  await browser?.close()
  await Promise.allSettled(sandboxes.map((id) => rest('DELETE', `/sandboxes/${id}`)))
  server?.kill('SIGKILL')
  try { ip('link', 'del', hostIf) } catch {}
  try { ip('netns', 'del', ns) } catch {}
})

test('approvals tab: a held connection is answered in the page (allow, deny, remembered), errors shown, stream reopened', { timeout: SLOW * 2 }, async () => {
  const id = await create({ denyOut: ['0.0.0.0/0'], approval: { stream: true, timeoutMs: HOLD_MS } })

  // The first approvals stream the page opens ends at once: the panel must
  // reopen it, with the key in a header, never in the URL.
  const opened = []
  page.on('request', (r) => {
    if (r.url().includes(`/sandboxes/${id}/network/approvals`) && r.method() === 'GET') opened.push({ url: r.url(), headers: r.headers() })
  })
  await page.route(`**/sandboxes/${id}/network/approvals`, (route) => route.fulfill({
    status: 200, headers: { 'Content-Type': 'text/event-stream' }, body: ': approvals\n\n'
  }), { times: 1 })

  await open(`/console/#/sandboxes/${id}`)
  await page.fill('#api-key', KEY)
  await page.click('#login')
  await page.locator('#tab-approvals').click()
  await page.locator('#approvals-empty').waitFor()
  await page.locator('#approvals-state', { hasText: 'live' }).waitFor()
  assert.ok(opened.length >= 2, `the stream was reopened (${opened.length} requests)`)
  for (const o of opened) {
    assert.equal(o.headers['x-api-key'], KEY)
    assert.ok(!o.url.includes(KEY), 'the API key is never in a URL')
  }

  const sbx = await Sandbox.connect(id, { apiKey: KEY, apiUrl: URL_, sandboxUrl: URL_, requestTimeoutMs: 120_000 })
  const row = (addr) => page.locator(`#approvals-pending tr.approval-pending[data-address="${addr}"]`)
  // Waits for addr's question in the page; when it does not come, says what
  // the held curl and the sandbox's egress log saw.
  const asked = async (addr, held) => {
    try {
      await row(addr).waitFor()
    } catch (e) {
      const c = await Promise.race([held.catch((err) => `error: ${err.message}`), new Promise((resolve) => setTimeout(() => resolve('still held'), 1000))])
      const log = await (await rest('GET', `/sandboxes/${id}/network/log?limit=20`)).text()
      await page.screenshot({ path: join(ART, 'approvals-failed.png'), fullPage: true })
      throw new Error(`no question about ${addr} in the page: curl ${JSON.stringify(c)}; egress log ${log}`, { cause: e })
    }
  }

  // Allow, this once: the held curl connects after the click.
  let held = curl(sbx, allowIP)
  await asked(allowIP, held)
  assert.match(await row(allowIP).innerText(), new RegExp(`${allowIP.replaceAll('.', '\\.')}:${PORT}[\\s\\S]*tcp`, 'i'))
  assert.equal(await page.locator('#approvals-count').innerText(), '1', 'the tab counts the pending question')
  await page.screenshot({ path: join(ART, 'approvals-pending.png'), fullPage: true })
  await row(allowIP).locator('button.approval-allow').click()
  let r = await held
  assert.equal(r.rc, 0, `allowed in the console: ${r.out}`)
  assert.match(r.out, new RegExp(`hello from ${allowIP.replaceAll('.', '\\.')}`))
  await row(allowIP).waitFor({ state: 'detached' })
  await page.locator('#approvals-recent tr[data-verdict="allow"]', { hasText: allowIP }).waitFor()
  // Recorded as the console's answer (the feed's entry), not a stream client's.
  assert.match(await page.locator('#approvals-recent tr', { hasText: allowIP }).first().locator('td').nth(3).innerText(), /^console$/)
  console.log(`allowed: curl connected in ${r.secs}s (held until the click)`)

  // An answer the API refuses is shown and leaves the question pending;
  // then Deny, this once: refused at once, long before the deadline.
  held = curl(sbx, denyIP)
  await asked(denyIP, held)
  await row(denyIP).locator('select.approval-remember').selectOption('minutes')
  await row(denyIP).locator('input.approval-minutes').fill('99999') // > the API's 30 days
  await row(denyIP).locator('button.approval-deny').click()
  await page.locator('#approvals-error', { hasText: /remember must be/ }).waitFor()
  assert.equal(await row(denyIP).count(), 1, 'a refused answer leaves the question pending')
  await page.screenshot({ path: join(ART, 'approvals-error.png'), fullPage: true })
  await row(denyIP).locator('select.approval-remember').selectOption('once')
  await row(denyIP).locator('button.approval-deny').click()
  r = await held
  assert.equal(r.rc, 7, `denied in the console: ${r.out}; want connection refused (curl 7)`)
  assert.ok(r.secs < HOLD_MS / 2000, `denied: refused after ${r.secs}s, as if at the ${HOLD_MS} ms deadline`)
  await row(denyIP).waitFor({ state: 'detached' })
  await page.locator('#approvals-recent tr[data-verdict="deny"]', { hasText: denyIP }).waitFor()
  console.log(`denied: refused after ${r.secs}s`)

  // Allow for the sandbox's life: the repeat connects without a question
  // (a held repeat would time curl out at 20 s).
  held = curl(sbx, memoIP)
  await asked(memoIP, held)
  await row(memoIP).locator('select.approval-remember').selectOption('sandbox')
  await row(memoIP).locator('button.approval-allow').click()
  r = await held
  assert.equal(r.rc, 0, `remembered allow: ${r.out}`)
  await page.locator('#approvals-recent tr[data-verdict="allow"]', { hasText: memoIP }).waitFor()
  assert.match(await page.locator('#approvals-recent tr', { hasText: memoIP }).first().innerText(), /sandbox/)
  const rows = []
  const seen = setInterval(async () => { rows.push(await row(memoIP).count().catch(() => 0)) }, 100)
  r = await curl(sbx, memoIP, 20)
  clearInterval(seen)
  assert.equal(r.rc, 0, `remembered allow, repeat: ${r.out}`)
  assert.ok(rows.every((n) => n === 0), 'the repeat was not asked')
  assert.equal(await page.locator('#approvals-empty').count(), 1)
  await page.screenshot({ path: join(ART, 'approvals-recent.png'), fullPage: true })

  // Answered elsewhere (an SDK, another page): the row leaves on the feed's
  // entry, and the decision is listed.
  held = curl(sbx, elsewhereIP)
  await asked(elsewhereIP, held)
  const decisionId = await row(elsewhereIP).getAttribute('data-decision')
  const res = await rest('POST', `/sandboxes/${id}/network/approvals/${decisionId}`, { decision: 'allow' })
  assert.equal(res.status, 204, await res.text())
  await row(elsewhereIP).waitFor({ state: 'detached' })
  await page.locator(`#approvals-recent tr[data-decision="${decisionId}"][data-verdict="allow"]`).waitFor()
  // A POST without "by" is a stream client's answer.
  assert.equal(await page.locator(`#approvals-recent tr[data-decision="${decisionId}"] td`).nth(3).innerText(), 'stream')
  r = await held
  assert.equal(r.rc, 0, `allowed elsewhere: ${r.out}`)

  // Not answered: the question leaves the list at its deadline, denied by
  // the timeout (the hook shortened to 5 s with PUT, the policy kept).
  const put = await rest('PUT', `/sandboxes/${id}/network`, { denyOut: ['0.0.0.0/0'], approval: { stream: true, timeoutMs: 5000 } })
  assert.equal(put.status, 204, await put.text())
  await page.locator('#approvals', { hasText: 'wait up to 5s' }).waitFor()
  held = curl(sbx, muteIP)
  await asked(muteIP, held)
  await row(muteIP).waitFor({ state: 'detached' })
  r = await held
  assert.equal(r.rc, 7, `unanswered: ${r.out}; want connection refused (curl 7)`)
  const timedOut = page.locator('#approvals-recent tr[data-verdict="deny"]', { hasText: 'timeout' }).first()
  await timedOut.waitFor()
  assert.match(await timedOut.innerText(), new RegExp(muteIP.replaceAll('.', '\\.')))

  // The egress log names who answered each: the console's clicks, the
  // REST answer without "by" (a stream client), the deadline.
  const log = await (await rest('GET', `/sandboxes/${id}/network/log?limit=100`)).text()
  const by = (addr) => (log.match(/\{[^{}]*\}/g) || []).filter((e) => e.includes(`"ip":"${addr}"`) && e.includes('approval by')).map((e) => e.match(/approval by (\w+)/)[1])
  for (const [addr, want] of [[allowIP, 'console'], [denyIP, 'console'], [memoIP, 'console'], [elsewhereIP, 'stream'], [muteIP, 'timeout']]) {
    const got = by(addr) // (a repeat the broker answers from memory says "remembered")
    assert.ok(got.includes(want) && got.every((b) => b === want || b === 'remembered'), `egress log: ${addr} answered by ${got}, want ${want}: ${log}`)
  }
})

test('approvals tab: a sandbox without the hook says so; the console turns it on and off, keeping the policy', { timeout: SLOW }, async () => {
  const id = await create({ denyOut: ['0.0.0.0/0'], allowOut: [allowIP] })
  await open(`/console/#/sandboxes/${id}`)
  await page.locator('#tab-approvals').click()
  await page.locator('#approvals-off', { hasText: 'network.approval' }).waitFor()
  await page.screenshot({ path: join(ART, 'approvals-off.png'), fullPage: true })

  await page.click('#approvals-enable')
  await page.locator('#approvals-state', { hasText: 'live' }).waitFor()
  let net = (await (await rest('GET', `/sandboxes/${id}`)).json()).network
  assert.equal(net.approval?.stream, true, JSON.stringify(net))
  assert.deepEqual(net.denyOut, ['0.0.0.0/0'], 'denyOut kept')
  assert.deepEqual(net.allowOut, [allowIP], 'allowOut kept')

  await page.click('#approvals-disable')
  await page.locator('#approvals-off').waitFor()
  net = (await (await rest('GET', `/sandboxes/${id}`)).json()).network
  assert.equal(net.approval, undefined, JSON.stringify(net))
  assert.deepEqual(net.denyOut, ['0.0.0.0/0'], 'denyOut kept')
  assert.deepEqual(net.allowOut, [allowIP], 'allowOut kept')
})
