import { useEffect, useState } from 'preact/hooks'
import { api, fmtBytes, fmtDuration } from './api.js'
import { SandboxActions } from './actions.jsx'

export function Sandboxes ({ cluster }) {
  const [list, setList] = useState(null)
  const [metrics, setMetrics] = useState({})
  const [state, setState] = useState('')
  const [meta, setMeta] = useState('')
  // What is typed; applied to the query (meta) on Enter or blur. The input is bound to the
  // draft so that the table's periodic re-render cannot wipe text that is still being typed.
  const [metaDraft, setMetaDraft] = useState('')
  const [msg, setMsg] = useState('')
  const [err, setErr] = useState('')
  const [tick, setTick] = useState(0)

  useEffect(() => {
    let stop = false
    async function load () {
      try {
        const q = new URLSearchParams()
        if (state) q.set('state', state)
        if (meta.trim()) q.set('metadata', meta.trim().split(/[,\s]+/).filter(Boolean).join('&'))
        q.set('limit', '100')
        const l = await api('GET', `/v2/sandboxes?${q}`)
        if (stop) return
        setList(l)
        setErr('')
        const ids = l.filter((s) => s.state === 'running').map((s) => s.sandboxID)
        if (ids.length) {
          const m = await api('GET', `/sandboxes/metrics?sandbox_ids=${ids.slice(0, 100).join(',')}`)
          if (!stop) setMetrics(m.sandboxes || {})
        }
      } catch (e) {
        if (!stop) setErr(e.message)
      }
    }
    load()
    const t = setInterval(load, 3000)
    return () => { stop = true; clearInterval(t) }
  }, [state, meta, tick])

  const now = Date.now()
  const refresh = () => setTick((t) => t + 1)
  return (
    <div>
      <h2>Sandboxes</h2>
      <div class="toolbar">
        <label>State <select id="filter-state" value={state} onChange={(e) => setState(e.target.value)}>
          <option value="">all</option><option value="running">running</option><option value="paused">paused</option>
        </select></label>
        <label>Metadata <input id="filter-metadata" placeholder="key=value, …" value={metaDraft} onInput={(e) => setMetaDraft(e.target.value)} onChange={(e) => setMeta(e.target.value)} /></label>
        <a href="#/playground" class="button">New sandbox in the playground</a>
      </div>
      {msg && <div class="info">{msg}</div>}
      {err && <div class="error">{err}</div>}
      {!list ? 'Loading…' : list.length === 0 ? <p class="muted" id="no-sandboxes">No sandboxes.</p> : (
        <table class="table" id="sandboxes">
          <thead><tr><th>ID</th><th>Template</th><th>State</th>{cluster && <th>Node</th>}<th>Metadata</th><th>Age</th><th>Time left</th><th>CPU</th><th>Memory</th><th /></tr></thead>
          <tbody>
            {list.map((sb) => {
              const m = sb.state === 'running' ? metrics[sb.sandboxID] : null
              return (
                <tr key={sb.sandboxID} data-sandbox={sb.sandboxID}>
                  <td><a href={`#/sandboxes/${encodeURIComponent(sb.sandboxID)}`}><code>{sb.sandboxID}</code></a></td>
                  <td>{sb.alias || sb.templateID}</td>
                  <td><span class={`badge ${sb.state}`}>{sb.state}</span></td>
                  {cluster && <td class="sandbox-node">{sb.clusterNode ? <a href="#/nodes">{sb.clusterNode}</a> : '–'}</td>}
                  <td class="meta">{Object.entries(sb.metadata || {}).map(([k, v]) => <span class="tag">{k}={v}</span>)}</td>
                  <td>{fmtDuration(now - new Date(sb.startedAt).getTime())}</td>
                  <td>{sb.state === 'running' ? fmtDuration(new Date(sb.endAt).getTime() - now) : '–'}</td>
                  <td>{m ? `${m.cpuUsedPct.toFixed(0)}% of ${m.cpuCount}` : '–'}</td>
                  <td>{m ? `${fmtBytes(m.memUsed)} / ${fmtBytes(m.memTotal)}` : '–'}</td>
                  <td><SandboxActions sb={sb} compact onDone={(s) => { setMsg(s); refresh() }} onError={(e) => setErr(e.message)} /></td>
                </tr>
              )
            })}
          </tbody>
        </table>
      )}
    </div>
  )
}
