// Placement and the node list: creates through the balancer spread over the
// nodes, the api tier lists every node live with its sandbox count, and a
// node's own API refuses anyone without the api tier's certificate and the
// cluster secret (11-security has the attacks).
import { describe, it, after } from 'node:test'
import assert from 'node:assert/strict'
import { LB, API1, API2, NODE_IDS, api, nodes, nodeURL, nodeFetch, clusterSecret, asAPITier, tracker, waitUntil, TEST_TIMEOUT } from './helpers.mjs'

const t = tracker('placement')
after(() => t.killAll())

describe('placement', { timeout: TEST_TIMEOUT * 3 }, () => {
  it('GET /airlock/v1/nodes lists the 3 nodes live, through either api instance', { timeout: TEST_TIMEOUT }, async () => {
    for (const base of [API1, API2, LB]) {
      const list = await nodes(base)
      assert.deepEqual(list.map((n) => n.id).sort(), [...NODE_IDS].sort(), `nodes through ${base}: ${JSON.stringify(list)}`)
      for (const n of list) {
        assert.equal(n.state, 'live', `node ${n.id} through ${base}: ${JSON.stringify(n)}`)
        assert.ok(n.addr, `node ${n.id} has no addr`)
        assert.ok(typeof n.heartbeatAgeMs === 'number' && n.heartbeatAgeMs < 10_000, `node ${n.id} heartbeat age ${n.heartbeatAgeMs}`)
        assert.ok(Array.isArray(n.templates) && n.templates.includes('base'), `node ${n.id} templates ${JSON.stringify(n.templates)}`)
      }
    }
  })

  it('6 creates through the balancer land on at least 2 nodes, and the node list counts them', { timeout: TEST_TIMEOUT }, async () => {
    const placed = []
    for (let i = 0; i < 6; i++) placed.push(await t.createRaw(LB))
    const byNode = {}
    for (const s of placed) {
      assert.ok(NODE_IDS.includes(s.node), `X-Airlock-Node ${s.node} is not a cluster node`)
      byNode[s.node] = (byNode[s.node] ?? 0) + 1
    }
    assert.ok(Object.keys(byNode).length >= 2, `all 6 creates landed on one node: ${JSON.stringify(byNode)}`)

    // Each sandbox is served by the node that created it.
    for (const s of placed) {
      const r = await api(LB, 'GET', `/sandboxes/${s.id}`)
      assert.equal(r.status, 200, `GET /sandboxes/${s.id}: ${r.status} ${r.text}`)
      assert.equal(r.node, s.node, `GET of ${s.id} answered by ${r.node}, created on ${s.node}`)
    }

    // Heartbeats carry the counts (every 2 s). Other sandboxes may be
    // counted too (a warm pool, or the kills of an earlier file not yet in
    // a heartbeat), so: at least ours, then ours fewer once killed.
    let last
    const counted = await waitUntil(async () => {
      last = await nodes(LB)
      return Object.entries(byNode).every(([id, want]) => (last.find((n) => n.id === id)?.sandboxes ?? -1) >= want)
    }, 15_000, 500)
    assert.ok(counted, `node sandbox counts ${JSON.stringify(last?.map((n) => [n.id, n.sandboxes]))}, want at least ${JSON.stringify(byNode)}`)
    assert.equal(last.filter((n) => n.state === 'live').length, 3)
    const peak = Object.fromEntries(last.map((n) => [n.id, n.sandboxes]))

    await t.killAll()
    const back = await waitUntil(async () => {
      last = await nodes(LB)
      return Object.entries(byNode).every(([id, ours]) => (last.find((n) => n.id === id)?.sandboxes ?? 99) <= peak[id] - ours)
    }, 15_000, 500)
    assert.ok(back, `node sandbox counts after the kills: ${JSON.stringify(last?.map((n) => [n.id, n.sandboxes]))}, at the peak ${JSON.stringify(peak)}, ours ${JSON.stringify(byNode)}`)
  })

  it('a node refuses requests, even with the api tier\'s certificate, without the cluster secret and the api tier\'s mark (401), except /health', { timeout: TEST_TIMEOUT }, async () => {
    for (const id of NODE_IDS) {
      const url = nodeURL(id)
      assert.ok(url, `no AIRLOCK_CLUSTER_NODE_${id.toUpperCase()}`)
      const health = await nodeFetch(url + '/health')
      assert.equal(health.status, 200, `${id} /health`)
      // No secret, the client's API key, a wrong secret, and the right secret
      // without the api tier's mark that it checked an API key.
      for (const headers of [{}, { 'X-API-Key': process.env.E2B_API_KEY }, { 'X-Airlock-Cluster-Secret': 'not-the-secret-0123456789', 'X-Airlock-Authenticated': 'api-key' },
        { 'X-Airlock-Cluster-Secret': clusterSecret() }]) {
        const r = await nodeFetch(url + '/sandboxes', { headers })
        assert.equal(r.status, 401, `${id} GET /sandboxes with ${JSON.stringify(Object.keys(headers))}: ${r.status}`)
        const c = await nodeFetch(url + '/v2/sandboxes', { method: 'POST', headers: { ...headers, 'Content-Type': 'application/json' }, body: '{"templateID":"base"}' })
        assert.equal(c.status, 401, `${id} POST /v2/sandboxes with ${JSON.stringify(Object.keys(headers))}: ${c.status}`)
      }
      const ok = await nodeFetch(url + '/sandboxes', { headers: asAPITier() })
      assert.equal(ok.status, 200, `${id} GET /sandboxes with the secret: ${ok.status}`)
    }
  })
  it('a full cluster answers 503 saying the cluster is full, with the largest free slot, not one node', { timeout: TEST_TIMEOUT * 2 }, async () => {
    await t.killAll()
    // Fill every node with 8-CPU sandboxes (the largest a create may ask
    // for) until a create is refused.
    const ns = await nodes(LB)
    const most = ns.reduce((sum, n) => sum + Math.ceil(Math.max(0, n.cpus - n.reservedCpus) / 8), 0) + NODE_IDS.length
    let refused
    for (let i = 0; i < most && !refused; i++) {
      const r = await api(LB, 'POST', '/v2/sandboxes', { templateID: 'base', timeout: 300, cpuCount: 8, metadata: t.metadata }, 120_000)
      if (r.status === 201) t.add(r.body.sandboxID)
      else refused = r
    }
    assert.ok(refused, `${most} creates of 8 CPUs all succeeded: the nodes state more CPUs than they list`)
    assert.equal(refused.status, 503, `the refused create: ${refused.status} ${refused.text}`)
    assert.match(refused.body.message, /^the cluster is full: /, refused.text)
    assert.match(refused.body.message, /the largest free slot on any node is \d+ CPUs and \d+ MiB memory \(on n\d\)/, refused.text)
    assert.doesNotMatch(refused.body.message, /node n\d is full/, refused.text)
    await t.killAll()
  })
})
