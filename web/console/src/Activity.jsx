import { useEffect, useRef, useState } from 'preact/hooks'
import { api } from './api.js'
import { followSSE } from './sse.js'

const enc = encodeURIComponent

// The entry groups the panel filters on (the type's prefix); "lagged" and
// anything unknown always show.
export const GROUPS = ['process', 'file', 'egress']
const KEEP = 2000 // entries kept in the page

/**
 * Follows GET /sandboxes/{id}/activity as server-sent events. EventSource
 * cannot send X-API-Key, so this is fetch with a streamed body; the key stays
 * in a header, never in the URL. onEntry gets each entry, onState a status
 * ("connecting", "live", "retrying in Ns", or an error text). A dropped
 * stream (or a "lagged" entry) is reopened with Last-Event-ID = the last id
 * seen, so nothing is missed or repeated. Returns a stop function.
 */
export function followActivity (id, { onEntry, onState, since = 0 }) {
  let last = since
  return followSSE(`/sandboxes/${enc(id)}/activity`, {
    lastId: () => last,
    onState,
    onEvent: (ev) => {
      if (ev.id) last = Number(ev.id)
      const e = JSON.parse(ev.data)
      onEntry(e)
      if (e.type === 'lagged') return false // reconnect from the last id sent
    }
  })
}

const argv = (d) => Array.isArray(d.argv) && d.argv.length ? d.argv.join(' ') : (d.path || '')

/** A one-line summary of an entry's data. */
export function summary (e) {
  const d = e.data || {}
  switch (e.type) {
    case 'process.start': return `${argv(d)}  (pid ${d.pid}, ppid ${d.ppid}${d.cwd ? ', cwd ' + d.cwd : ''})`
    case 'process.exit': return `${argv(d)}  (pid ${d.pid}) → ${d.signal != null ? 'signal ' + d.signal : 'exit ' + d.exitCode}`
    case 'egress.connect': return `${d.verdict} ${d.protocol || ''} ${d.ip}${d.port != null ? ':' + d.port : ''}${d.domain ? ' (' + d.domain + ')' : ''}${d.rule ? '  rule ' + d.rule : ''}`
    case 'egress.dns': return `${d.verdict} ${d.qtype || ''} ${d.name}${Array.isArray(d.answers) && d.answers.length ? ' → ' + d.answers.join(', ') : ''}${d.rule ? '  rule ' + d.rule : ''}`
    case 'lagged': return `the page read too slowly after id ${d.lastId}; reconnecting`
    default:
      if (e.type.startsWith('file.')) {
        const rest = Object.entries(d).filter(([k]) => k !== 'path').map(([k, v]) => `${k} ${v}`).join(', ')
        return `${d.path || ''}${rest ? '  (' + rest + ')' : ''}`
      }
      return JSON.stringify(d)
  }
}

const group = (t) => t.split('.')[0]
const verdictClass = (e) => {
  const v = e.data && e.data.verdict
  return typeof v === 'string' && /^(deny|denied|drop|block)/i.test(v) ? 'denied' : ''
}

/** The live activity panel of a sandbox's page. */
export function ActivityPanel ({ id }) {
  const [entries, setEntries] = useState([]) // what the view shows
  const [state, setState] = useState('connecting')
  const [paused, setPaused] = useState(false)
  const [held, setHeld] = useState(0)
  const [show, setShow] = useState(() => Object.fromEntries(GROUPS.map((g) => [g, true])))
  const pausedRef = useRef(false)
  const pending = useRef([])

  useEffect(() => {
    const add = (list) => setEntries((old) => {
      const out = old.concat(list)
      return out.length > KEEP ? out.slice(out.length - KEEP) : out
    })
    const stop = followActivity(id, {
      onState: setState,
      onEntry: (e) => {
        if (pausedRef.current) {
          pending.current.push(e)
          setHeld(pending.current.length)
        } else add([e])
      }
    })
    return stop
  }, [id])

  function togglePause () {
    const p = !paused
    pausedRef.current = p
    setPaused(p)
    if (!p && pending.current.length) {
      const list = pending.current
      pending.current = []
      setHeld(0)
      setEntries((old) => {
        const out = old.concat(list)
        return out.length > KEEP ? out.slice(out.length - KEEP) : out
      })
    }
  }

  const visible = entries.filter((e) => !GROUPS.includes(group(e.type)) || show[group(e.type)])
  return (
    <div id="activity">
      <div class="toolbar">
        {GROUPS.map((g) => (
          <label class="activity-filter"><input type="checkbox" id={'activity-show-' + g} checked={show[g]} onChange={(ev) => setShow({ ...show, [g]: ev.currentTarget.checked })} /> {g}</label>
        ))}
        <button id="activity-pause" onClick={togglePause}>{paused ? 'Resume' : 'Pause'}</button>
        <button id="activity-clear" onClick={() => setEntries([])}>Clear</button>
        <span id="activity-state" class={'muted activity-state ' + (state === 'live' ? 'live' : '')}>{paused ? `paused (${held} new)` : state}</span>
      </div>
      {visible.length === 0
        ? <p class="muted" id="activity-empty">no activity yet</p>
        : (
          <table class="activity" id="activity-table">
            <thead><tr><th>id</th><th>time</th><th>type</th><th>what</th></tr></thead>
            <tbody>
              {visible.slice().reverse().map((e) => (
                <tr data-id={e.id} data-type={e.type} class={'activity-' + group(e.type) + ' ' + verdictClass(e)}>
                  <td class="muted">{e.id || ''}</td>
                  <td class="muted">{new Date(e.time).toLocaleTimeString()}</td>
                  <td><span class="tag">{e.type}</span></td>
                  <td class="activity-what"><code>{summary(e)}</code></td>
                </tr>
              ))}
            </tbody>
          </table>
          )}
    </div>
  )
}

/** The sandbox's E2B lifecycle events (GET /events/sandboxes/{id}), oldest first, every 5 s. */
export function LifecycleEvents ({ id }) {
  const [list, setList] = useState(null)
  const [err, setErr] = useState('')
  useEffect(() => {
    let stop = false
    async function load () {
      try {
        const l = await api('GET', `/events/sandboxes/${enc(id)}?orderAsc=true&limit=100`)
        if (!stop) { setList(Array.isArray(l) ? l : []); setErr('') }
      } catch (e) {
        if (!stop) setErr(e.message)
      }
    }
    load()
    const t = setInterval(load, 5000)
    return () => { stop = true; clearInterval(t) }
  }, [id])
  if (err && !list) return <p class="muted" id="lifecycle-error">{err}</p>
  if (!list) return 'Loading…'
  if (list.length === 0) return <p class="muted" id="lifecycle">no lifecycle events</p>
  return (
    <table id="lifecycle">
      <thead><tr><th>time</th><th>event</th><th>data</th></tr></thead>
      <tbody>
        {list.map((e) => (
          <tr data-event={e.type} data-id={e.id}>
            <td class="muted">{new Date(e.timestamp).toLocaleString()}</td>
            <td><span class="tag">{e.type.replace(/^sandbox\.lifecycle\./, '')}</span></td>
            <td><code>{e.eventData == null ? '' : JSON.stringify(e.eventData)}</code></td>
          </tr>
        ))}
      </tbody>
    </table>
  )
}
