import { useEffect, useState } from 'preact/hooks'
import { Sandbox } from 'e2b'
import { api, apiResponse, fmtBytes, fmtDuration, sdkOpts } from './api.js'
import { SandboxActions } from './actions.jsx'
import { Chart } from './Chart.jsx'
import { Terminal } from './Terminal.jsx'
import { Files } from './Files.jsx'
import { ActivityPanel, LifecycleEvents } from './Activity.jsx'
import { ApprovalsPanel } from './Approvals.jsx'

const enc = encodeURIComponent

export function SandboxPage ({ id }) {
  const [sb, setSb] = useState(null)
  const [node, setNode] = useState('')
  const [gone, setGone] = useState('')
  const [samples, setSamples] = useState([])
  const [logs, setLogs] = useState(null)
  const [tab, setTab] = useState('terminal')
  const [sbx, setSbx] = useState(null)
  const [msg, setMsg] = useState('')
  const [err, setErr] = useState('')
  const [tick, setTick] = useState(0)
  const [asking, setAsking] = useState(0) // pending approval questions

  useEffect(() => {
    let stop = false
    async function load () {
      try {
        // Through a cluster's api tier the answer names the node that runs the sandbox.
        const { data: s, headers } = await apiResponse('GET', `/sandboxes/${enc(id)}`)
        if (stop) return
        setSb(s)
        setNode(headers.get('X-Airlock-Node') || '')
        const start = Math.floor(new Date(s.startedAt).getTime() / 1000)
        const m = await api('GET', `/sandboxes/${enc(id)}/metrics?start=${start}`)
        if (!stop) setSamples(m || [])
      } catch (e) {
        if (stop) return
        if (e.status === 404) setGone(e.message)
        else setErr(e.message)
      }
      try {
        const l = await api('GET', `/sandboxes/${enc(id)}/logs`)
        if (!stop) setLogs(l && Array.isArray(l.logs) ? l.logs : [])
      } catch { if (!stop) setLogs([]) }
    }
    load()
    const t = setInterval(load, 5000)
    return () => { stop = true; clearInterval(t) }
  }, [id, tick])

  const running = sb && sb.state === 'running'
  useEffect(() => {
    if (!running || sbx) return
    Sandbox.connect(id, sdkOpts()).then(setSbx, (e) => setErr(`connecting: ${e.message}`))
  }, [running, id])

  if (gone) return <div><h2>Sandbox <code>{id}</code></h2><p class="muted" id="sandbox-gone">{gone}</p><a href="#/sandboxes">Back to sandboxes</a></div>
  if (!sb) return <div>{err ? <div class="error">{err}</div> : 'Loading…'}</div>
  const xs = samples.map((s) => s.timestampUnix)
  return (
    <div>
      <h2>Sandbox <code>{id}</code> <span class={`badge ${sb.state}`}>{sb.state}</span></h2>
      <div class="kv">
        <span>template <b>{sb.alias || sb.templateID}</b></span>
        {node && <span id="sandbox-node">node <a href="#/nodes"><b>{node}</b></a></span>}
        <span>{sb.cpuCount} CPU, {sb.memoryMB} MiB, disk {sb.diskSizeMB} MiB</span>
        <span>age {fmtDuration(Date.now() - new Date(sb.startedAt).getTime())}</span>
        {running && <span>time left {fmtDuration(new Date(sb.endAt).getTime() - Date.now())}</span>}
        {Object.entries(sb.metadata || {}).map(([k, v]) => <span class="tag">{k}={v}</span>)}
      </div>
      <SandboxActions sb={sb} onDone={(s) => { setMsg(s); setTick((t) => t + 1) }} onError={(e) => setErr(e.message)} />
      {msg && <div class="info">{msg}</div>}
      {err && <div class="error">{err}</div>}
      <div class="charts">
        <Chart title="CPU used" data={[xs, samples.map((s) => s.cpuUsedPct)]} series={[{ label: 'cpu %', stroke: '#10b981' }]} fmt={(v) => `${Math.round(v)}%`} />
        <Chart title="Memory used" data={[xs, samples.map((s) => s.memUsed)]} series={[{ label: 'memory', stroke: '#8b5cf6' }]} fmt={fmtBytes} />
      </div>
      <div class="tabs">
        {['terminal', 'files', 'activity', 'approvals', 'events', 'logs'].map((t) => (
          <button id={'tab-' + t} class={tab === t ? 'active' : ''} onClick={() => setTab(t)}>
            {t}{t === 'approvals' && asking > 0 && <span class="badge paused" id="approvals-count">{asking}</span>}
          </button>
        ))}
      </div>
      {/* Mounted on every tab, so pending questions are counted on the tab's label. */}
      <div style={tab === 'approvals' ? '' : 'display: none'}>
        <ApprovalsPanel id={id} sb={sb} visible={tab === 'approvals'} onPending={setAsking} onChanged={(s) => { setMsg(s); setTick((t) => t + 1) }} />
      </div>
      {tab === 'terminal' && (running ? <Terminal id={id} /> : <p class="muted">The terminal needs a running sandbox.</p>)}
      {tab === 'files' && (running ? (sbx ? <Files sbx={sbx} /> : 'Connecting…') : <p class="muted">Files need a running sandbox.</p>)}
      {tab === 'activity' && <ActivityPanel id={id} />}
      {tab === 'events' && <LifecycleEvents id={id} />}
      {tab === 'logs' && (
        !logs || logs.length === 0
          ? <p class="muted" id="logs">no logs</p>
          : <pre class="logs" id="logs">{logs.map((l) => `${l.timestamp}  ${l.line}`).join('\n')}</pre>
      )}
    </div>
  )
}
