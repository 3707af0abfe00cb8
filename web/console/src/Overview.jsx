import { useEffect, useState } from 'preact/hooks'
import { apiResponse, fmtBytes } from './api.js'
import { Chart } from './Chart.jsx'

const pct = (v) => `${Math.round(v)}%`

export function Overview () {
  const [d, setD] = useState(null)
  const [err, setErr] = useState('')
  // Through a cluster's api tier, one node answers (X-Airlock-Node).
  const [node, setNode] = useState('')
  useEffect(() => {
    let stop = false
    const load = () => apiResponse('GET', '/console/api/overview').then(
      ({ data, headers }) => { if (!stop) { setD(data); setNode(headers.get('X-Airlock-Node') || ''); setErr('') } },
      (e) => setErr(e.message))
    load()
    const t = setInterval(load, 5000)
    return () => { stop = true; clearInterval(t) }
  }, [])
  if (!d) return <div>{err ? <div class="error">{err}</div> : 'Loading…'}</div>
  const host = d.host || []
  const last = host[host.length - 1] || {}
  const cpm = d.createsPerMinute || []
  const creates = cpm.reduce((a, m) => a + m.creates, 0)
  const failed = cpm.reduce((a, m) => a + m.failed, 0)
  const lat = d.createLatency || {}
  return (
    <div>
      <h2>Overview</h2>
      {node && <div class="info" id="overview-node">These numbers are node <b>{node}</b>'s (its host, its sandboxes and creates);
        the cluster's nodes and their load are under <a href="#/nodes">Nodes</a>.</div>}
      {err && <div class="error">{err}</div>}
      <div class="stats">
        <Stat id="stat-running" label="Sandboxes running" value={d.states.running ?? 0} />
        <Stat label="Paused" value={d.states.paused ?? 0} />
        <Stat label="Creates (last hour)" value={creates} sub={failed ? `${failed} failed` : ''} />
        <Stat label="Create latency p50 / p99" value={lat.count ? `${lat.p50.toFixed(2)} s / ${lat.p99.toFixed(2)} s` : '–'} sub={`${lat.count || 0} successful create${lat.count === 1 ? '' : 's'}`} />
        <Stat label="Host CPU" value={last.cpuPct != null ? pct(last.cpuPct) : '–'} />
        <Stat label="Host memory" value={`${fmtBytes(last.memUsed)} / ${fmtBytes(last.memTotal)}`} />
        <Stat label="Data disk" value={`${fmtBytes(last.diskUsed)} / ${fmtBytes(last.diskTotal)}`} />
      </div>
      <div class="charts">
        <Chart title="Creates per minute" bars data={[cpm.map((m) => m.t), cpm.map((m) => m.creates), cpm.map((m) => m.failed)]}
          series={[{ label: 'creates', stroke: '#3b82f6', fill: '#3b82f655' }, { label: 'failed', stroke: '#ef4444', fill: '#ef444455' }]} />
        <Chart title="Host CPU" data={[host.map((s) => s.t), host.map((s) => s.cpuPct)]} series={[{ label: 'cpu', stroke: '#10b981' }]} fmt={pct} window={1800} ymax={100} />
        <Chart title="Host memory used" data={[host.map((s) => s.t), host.map((s) => s.memUsed)]} series={[{ label: 'memory', stroke: '#8b5cf6' }]} fmt={fmtBytes} window={1800} ymax={last.memTotal} />
        <Chart title="Data disk used" data={[host.map((s) => s.t), host.map((s) => s.diskUsed)]} series={[{ label: 'disk', stroke: '#f59e0b' }]} fmt={fmtBytes} window={1800} ymax={last.diskTotal} />
      </div>
    </div>
  )
}

export function Stat ({ label, value, sub, id }) {
  return <div class="stat" id={id}><div class="stat-label">{label}</div><div class="stat-value">{value}</div>{sub && <div class="muted">{sub}</div>}</div>
}
