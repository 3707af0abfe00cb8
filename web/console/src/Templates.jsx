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
  useEffect(() => {
    api('GET', '/templates').then(setList, (e) => setErr(e.message))
  }, [tick])
  return (
    <div>
      <h2>Templates</h2>
      {err && <div class="error">{err}</div>}
      {!list ? 'Loading…' : (
        <table class="table" id="templates">
          <thead><tr><th>Name</th><th>ID</th><th>Size</th><th>CPU / memory</th><th>Builds</th><th>Sandboxes started</th><th>Built</th><th>Last used</th></tr></thead>
          <tbody>
            {list.map((t) => (
              <tr key={t.templateID} data-template={(t.aliases && t.aliases[0]) || t.templateID}>
                <td>{(t.aliases || []).join(', ') || t.templateID}</td>
                <td><code>{t.templateID}</code></td>
                <td>{fmtBytes(t.sizeBytes)}</td>
                <td>{t.cpuCount} CPU, {t.memoryMB} MiB</td>
                <td>{t.buildCount} ({t.buildStatus})</td>
                <td>{t.spawnCount}</td>
                <td>{new Date(t.updatedAt || t.createdAt).toLocaleString()}</td>
                <td>{t.lastSpawnedAt ? new Date(t.lastSpawnedAt).toLocaleString() : '–'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <Build onDone={() => setTick((t) => t + 1)} />
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
