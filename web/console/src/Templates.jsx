import { useEffect, useRef, useState } from 'preact/hooks'
import { api, fmtBytes, getKey } from './api.js'
import { tar } from './tar.js'

const EXAMPLE = `FROM code-interpreter-v1
RUN echo "hello from a console build" > /etc/motd
ENV GREETING=hello
WORKDIR /home/user
`

export function Templates () {
  const [list, setList] = useState(null)
  const [err, setErr] = useState('')
  const [tick, setTick] = useState(0)
  const [open, setOpen] = useState('')
  useEffect(() => {
    api('GET', '/templates').then(setList, (e) => setErr(e.message))
  }, [tick])
  return (
    <div>
      <h2>Templates</h2>
      {err && <div class="error">{err}</div>}
      {!list ? 'Loading…' : (
        <table class="table" id="templates">
          <thead><tr><th>Name</th><th>Tags</th><th>ID</th><th>Size</th><th>CPU / memory</th><th>Builds</th><th>Sandboxes started</th><th>Built</th><th>Last used</th><th /></tr></thead>
          <tbody>
            {list.map((t) => [
              <tr key={t.templateID} data-template={(t.aliases && t.aliases[0]) || t.templateID}>
                <td>{(t.aliases || []).join(', ') || t.templateID}</td>
                <td class="template-tags">{(t.tags || []).map((tag) => <span class="tag" key={tag}>{tag}</span>)}</td>
                <td><code>{t.templateID}</code></td>
                <td>{fmtBytes(t.sizeBytes)}</td>
                <td>{t.cpuCount} CPU, {t.memoryMB} MiB</td>
                <td>{t.buildCount} ({t.buildStatus})</td>
                <td>{t.spawnCount}</td>
                <td>{new Date(t.updatedAt || t.createdAt).toLocaleString()}</td>
                <td>{t.lastSpawnedAt ? new Date(t.lastSpawnedAt).toLocaleString() : '–'}</td>
                <td>{!t.snapshot && <button class="show-builds" type="button" onClick={() => setOpen(open === t.templateID ? '' : t.templateID)}>{open === t.templateID ? 'Hide builds' : 'Builds'}</button>}</td>
              </tr>,
              open === t.templateID && (
                <tr key={`${t.templateID}-builds`} class="template-detail" data-builds-of={t.templateID}>
                  <td colSpan={10}><TemplateBuilds id={t.templateID} /></td>
                </tr>
              )
            ])}
          </tbody>
        </table>
      )}
      <Build onDone={() => setTick((t) => t + 1)} />
    </div>
  )
}

/** The builds of one template (GET /templates/{id}: E2B's TemplateWithBuilds)
 *  with their status; an SDK build's log (GET …/builds/{build}/logs) on click,
 *  followed while it runs. */
function TemplateBuilds ({ id }) {
  const [builds, setBuilds] = useState(null)
  const [err, setErr] = useState('')
  const [shown, setShown] = useState('')
  const [logs, setLogs] = useState(null)
  const base = `/templates/${encodeURIComponent(id)}`
  useEffect(() => {
    let stop = false
    let timer
    const load = () => api('GET', base).then((t) => {
      if (stop) return
      setBuilds(t.builds || [])
      if ((t.builds || []).some((b) => b.status === 'building' || b.status === 'waiting')) timer = setTimeout(load, 1000)
    }, (e) => setErr(e.message))
    load()
    return () => { stop = true; clearTimeout(timer) }
  }, [id])
  const status = shown && builds ? (builds.find((b) => b.buildID === shown) || {}).status : ''
  useEffect(() => {
    if (!shown) return
    let stop = false
    let timer
    const load = () => api('GET', `${base}/builds/${encodeURIComponent(shown)}/logs?limit=1000`).then((r) => {
      if (stop) return
      setLogs(r.logs || [])
      if (status === 'building' || status === 'waiting') timer = setTimeout(load, 1000)
    }, (e) => setLogs([{ level: 'error', message: `no log: ${e.message}` }]))
    load()
    return () => { stop = true; clearTimeout(timer) }
  }, [shown, status])
  if (err) return <div class="error">{err}</div>
  if (!builds) return 'Loading builds…'
  return (
    <div class="builds">
      <table class="table template-builds">
        <thead><tr><th>Build</th><th>Status</th><th>Tags</th><th>Started</th><th>Finished</th><th /></tr></thead>
        <tbody>
          {builds.map((b) => (
            <tr key={b.buildID} data-build={b.buildID}>
              <td><code>{b.buildID}</code></td>
              <td><span class={`badge build-status ${b.status}`}>{b.status}</span>{b.reason && <div class="error build-reason">{b.reason}</div>}</td>
              <td>{(b.tags || []).map((tag) => <span class="tag" key={tag}>{tag}</span>)}</td>
              <td>{new Date(b.createdAt).toLocaleString()}</td>
              <td>{b.finishedAt ? new Date(b.finishedAt).toLocaleString() : '–'}</td>
              <td>{b.tags && <button class="show-build-log" type="button" onClick={() => { setLogs(null); setShown(shown === b.buildID ? '' : b.buildID) }}>{shown === b.buildID ? 'Hide log' : 'Log'}</button>}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {shown && (logs === null ? 'Loading log…' : (
        <pre class="logs sdk-build-log" data-build-log={shown}>{logs.map((e) => `${e.timestamp ? new Date(e.timestamp).toLocaleTimeString() + ' ' : ''}${e.level === 'error' ? 'ERROR ' : ''}${e.message}`).join('\n')}</pre>
      ))}
    </div>
  )
}

function Build ({ onDone }) {
  const [name, setName] = useState('my-template')
  const [df, setDf] = useState(EXAMPLE)
  const [log, setLog] = useState([])
  const [busy, setBusy] = useState(false)
  const [result, setResult] = useState('')
  const pre = useRef(null)
  useEffect(() => { if (pre.current) pre.current.scrollTop = pre.current.scrollHeight }, [log])

  async function build (e) {
    e.preventDefault()
    setBusy(true)
    setLog([])
    setResult('')
    const add = (line) => setLog((l) => [...l, line])
    try {
      const r = await fetch(`/airlock/v1/templates/${encodeURIComponent(name)}/build`, {
        method: 'POST',
        headers: { 'X-API-Key': getKey(), 'Content-Type': 'application/x-tar' },
        body: tar([{ name: 'Dockerfile', data: df }])
      })
      if (!r.ok) {
        const t = await r.text()
        let m = t
        try { m = JSON.parse(t).message } catch {}
        throw new Error(m || `${r.status}`)
      }
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader()
      let buf = ''
      for (;;) {
        const { value, done } = await reader.read()
        if (done) break
        buf += value
        let i
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i)
          buf = buf.slice(i + 1)
          if (!line.trim()) continue
          let ev
          try { ev = JSON.parse(line) } catch { add(line); continue }
          if (ev.error) { setResult(`failed: ${ev.error}`); add(`ERROR ${ev.error}`) } else if (ev.template) { setResult(`built ${name} (${fmtBytes(ev.template.sizeBytes)})`) } else {
            add(`${ev.phase === 'output' ? '  ' : ''}${ev.message ?? ''}`)
          }
        }
      }
      onDone()
    } catch (e) {
      setResult(`failed: ${e.message}`)
    } finally { setBusy(false) }
  }
  return (
    <form class="card build" onSubmit={build}>
      <h3>Build a template from a Dockerfile</h3>
      <label>Name <input id="build-name" value={name} onInput={(e) => setName(e.target.value)} pattern="[a-z0-9][a-z0-9._\-]*" /></label>
      <textarea id="build-dockerfile" rows={8} value={df} spellcheck={false} onInput={(e) => setDf(e.target.value)} />
      <button id="build-start" type="submit" disabled={busy}>{busy ? 'Building…' : 'Build'}</button>
      {result && <div class={result.startsWith('failed') ? 'error' : 'info'} id="build-result">{result}</div>}
      {log.length > 0 && <pre class="logs" id="build-log" ref={pre}>{log.join('\n')}</pre>}
    </form>
  )
}
