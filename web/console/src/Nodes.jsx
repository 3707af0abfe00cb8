import { useEffect, useState } from 'preact/hooks'
import { api, fmtDuration } from './api.js'
import { Stat } from './Overview.jsx'

// A cluster's nodes (GET /airlock/v1/nodes, answered by the api tier only):
// state, capacity and what their sandboxes hold, heartbeat age.

/** Heartbeats come every 2 s; one older than this is marked late. */
const LATE_MS = 6000

// Templates lists names ("name", "name:tag") and the content hashes of
// their files; only the names are counted.
const isHash = (t) => /^[0-9a-f]{64}$/.test(t)
export const templateNames = (n) => (n.templates || []).filter((t) => !isHash(t))

export function Nodes () {
  const [nodes, setNodes] = useState(null)
  const [err, setErr] = useState('')
  const [at, setAt] = useState(0)
  useEffect(() => {
    let stop = false
    const load = () => api('GET', '/airlock/v1/nodes').then(
      (v) => { if (!stop) { setNodes(v || []); setAt(Date.now()); setErr('') } },
      (e) => { if (!stop) setErr(e.message) })
    load()
    const t = setInterval(load, 3000)
    return () => { stop = true; clearInterval(t) }
  }, [])
  if (!nodes) return <div><h2>Nodes</h2>{err ? <div class="error">{err}</div> : 'Loading…'}</div>
  const count = (s) => nodes.filter((n) => n.state === s).length
  const up = nodes.filter((n) => n.state !== 'lost')
  const sum = (f) => up.reduce((a, n) => a + (f(n) || 0), 0)
  return (
    <div>
      <h2>Nodes</h2>
      {err && <div class="error">{err} (showing the nodes as of {new Date(at).toLocaleTimeString()})</div>}
      <div class="stats">
        <Stat id="stat-nodes" label="Nodes live / draining / lost" value={`${count('live')} / ${count('draining')} / ${count('lost')}`} />
        <Stat label="Sandboxes" value={`${sum((n) => n.sandboxes)} / ${sum((n) => n.maxSandboxes)}`} sub="on live and draining nodes" />
        <Stat label="CPUs reserved" value={`${sum((n) => n.reservedCpus)} / ${sum((n) => n.cpus)}`} />
        <Stat label="Memory reserved" value={`${fmtMiB(sum((n) => n.reservedMemoryMB))} / ${fmtMiB(sum((n) => n.memoryMB))}`} />
      </div>
      {nodes.length === 0 ? <p class="muted" id="no-nodes">No node has registered yet.</p> : (
        <table class="table" id="nodes">
          <thead><tr><th>Node</th><th>State</th><th>Runtime</th><th>Labels</th><th>Sandboxes</th><th>CPU reserved</th><th>Memory reserved</th><th>Heartbeat</th><th>Templates</th><th>Warm pool</th><th>Up</th></tr></thead>
          <tbody>
            {nodes.map((n) => {
              const names = templateNames(n)
              const warm = Object.entries(n.warmPool || {}).filter(([, v]) => v > 0)
              const p = n.placement || {}
              const pending = (p.inFlightCreates || 0) + (p.confirmedCreates || 0)
              const late = n.state !== 'lost' && n.heartbeatAgeMs >= LATE_MS
              return (
                <tr key={n.id} data-node={n.id} data-state={n.state} class={`node-${n.state}`}>
                  <td><b>{n.id}</b><div class="muted small">{n.addr}{n.version ? ` · ${n.version}` : ''}</div></td>
                  <td class="node-state">
                    <span class={`badge node ${n.state}`} title={stateHelp[n.state] || ''}>{stateMark[n.state] || ''}{n.state}</span>
                    {n.state === 'lost' && n.lostAt && <div class="muted small">since {new Date(n.lostAt).toLocaleTimeString()}</div>}
                  </td>
                  <td>{n.runtime}</td>
                  <td class="meta node-labels">{(n.labels || []).map((l) => <span class="tag" key={l}>{l}</span>)}</td>
                  <td class="node-sandboxes">
                    <Bar used={n.sandboxes} total={n.maxSandboxes} label={`${n.sandboxes} / ${n.maxSandboxes}`} />
                    {pending > 0 && <div class="muted small" title="creates this api instance placed there that the node's heartbeat does not count yet">+{pending} placing</div>}
                  </td>
                  <td class="node-cpu"><Bar used={n.reservedCpus} total={n.cpus} label={`${n.reservedCpus} / ${n.cpus}`} /></td>
                  <td class="node-memory"><Bar used={n.reservedMemoryMB} total={n.memoryMB} label={`${fmtMiB(n.reservedMemoryMB)} / ${fmtMiB(n.memoryMB)}`} /></td>
                  <td class={`node-heartbeat${late ? ' late' : ''}`} title={late ? 'no heartbeat for a while: the node is lost after 15 s' : ''}>{fmtAge(n.heartbeatAgeMs)} ago</td>
                  <td class="node-templates" title={names.join('\n')}>{names.length}</td>
                  <td class="meta">{warm.length ? warm.map(([k, v]) => <span class="tag" key={k}>{k}×{v}</span>) : '–'}</td>
                  <td>{n.startedAt ? fmtDuration(Date.now() - new Date(n.startedAt).getTime()) : '–'}</td>
                </tr>
              )
            })}
          </tbody>
        </table>
      )}
      <p class="muted small">Reserved: what the node's running sandboxes hold, as of its last heartbeat (every 2 s); a node without heartbeats for 15 s is lost.
        A draining node takes no new sandboxes; its sandboxes keep running.</p>
    </div>
  )
}

const stateMark = { lost: '✕ ', draining: '‖ ' }
const stateHelp = {
  live: 'takes new sandboxes',
  draining: 'takes no new sandboxes; the ones it runs keep running',
  lost: 'no heartbeat: its running sandboxes were reported gone'
}

function fmtMiB (mb) {
  if (mb == null || isNaN(mb)) return '–'
  return mb >= 1024 ? `${(mb / 1024).toFixed(1)} GiB` : `${mb} MiB`
}

function fmtAge (ms) {
  if (ms == null || isNaN(ms)) return '–'
  return ms < 60_000 ? `${(ms / 1000).toFixed(1)} s` : fmtDuration(ms)
}

function Bar ({ used, total, label }) {
  const pct = total > 0 ? Math.min(100, (100 * (used || 0)) / total) : 0
  const level = pct >= 90 ? 'high' : pct >= 70 ? 'mid' : ''
  return (
    <div class="bar-cell">
      <div class="bar" title={`${pct.toFixed(0)}%`}><span class={level} style={{ width: `${pct}%` }} /></div>
      <span class="bar-label">{label}</span>
    </div>
  )
}
