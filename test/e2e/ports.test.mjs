// Public ports: a server inside the sandbox is reachable through the daemon
// by header routing (E2b-Sandbox-Port) and host routing (sbx.getHost), and
// allowPublicTraffic:false requires the traffic access token.
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { tracker, waitUntil, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('ports')
after(() => t.killAll())

const PORT = 8080
const base = new URL(process.env.E2B_SANDBOX_URL ?? process.env.E2B_API_URL)

/** GET / on the daemon with the given headers; resolves {status, body}. */
function get (headers) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: base.hostname, port: base.port, path: '/', headers }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (c) => { body += c })
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.end()
  })
}

/** Starts a static HTTP server on PORT serving a file with marker. */
async function serve (sbx, marker) {
  await sbx.files.write('/home/user/www/index.html', marker)
  await sbx.commands.run(`cd /home/user/www && python3 -m http.server ${PORT} --bind 0.0.0.0`, { background: true })
  const up = await waitUntil(async () => (await sbx.commands.run(`python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:${PORT}/').status)" 2>/dev/null || true`)).stdout.trim() === '200', 30_000, 300)
  assert.ok(up, 'server did not start inside the sandbox')
}

describe('public ports', { timeout: TEST_TIMEOUT * 2 }, () => {
  it('header and host routing reach a server in the sandbox', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create()
    const marker = `hello-${sbx.sandboxId}`
    await serve(sbx, marker)

    const byHeader = await get({ 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(PORT) })
    assert.equal(byHeader.status, 200)
    assert.equal(byHeader.body, marker)

    const host = sbx.getHost(PORT)
    assert.match(host, new RegExp(`^${PORT}-${sbx.sandboxId}\\.`))
    const byHost = await get({ Host: host })
    assert.equal(byHost.status, 200)
    assert.equal(byHost.body, marker)

    // A closed port is a 502 (what the SDKs read as "not running").
    const closed = await get({ Host: sbx.getHost(PORT + 1) })
    assert.equal(closed.status, 502)
  })

  it('allowPublicTraffic:false needs the traffic access token', { timeout: TEST_TIMEOUT }, async () => {
    const sbx = await t.create({ network: { allowPublicTraffic: false } })
    assert.ok(sbx.trafficAccessToken, 'no trafficAccessToken returned')
    const marker = `private-${sbx.sandboxId}`
    await serve(sbx, marker) // envd (port 49983) needs no traffic token

    const host = sbx.getHost(PORT)
    const without = await get({ Host: host })
    assert.equal(without.status, 403)
    const wrong = await get({ Host: host, 'E2b-Traffic-Access-Token': 'nope' })
    assert.equal(wrong.status, 403)
    const withToken = await get({ Host: host, 'E2b-Traffic-Access-Token': sbx.trafficAccessToken })
    assert.equal(withToken.status, 200)
    assert.equal(withToken.body, marker)
    const byHeader = await get({ 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(PORT) })
    assert.equal(byHeader.status, 403)
  })
})
