import { useEffect, useState } from 'preact/hooks'
import { Sandbox } from '@e2b/code-interpreter'
import { api, sdkOpts } from './api.js'
import { Result } from './Output.jsx'

// Tracebacks from IPython carry ANSI colour codes.
// eslint-disable-next-line no-control-regex
const stripANSI = (s) => String(s ?? '').replace(/\x1b\[[0-9;]*[A-Za-z]/g, '')

let nextCell = 1
const newCell = (language = 'python', code = '') => ({ id: nextCell++, language, code, out: [], results: [], error: null, running: false, ran: false })

const EXAMPLE = `import matplotlib.pyplot as plt
import numpy as np
x = np.linspace(0, 6.3, 200)
plt.plot(x, np.sin(x))
plt.title("sin(x)")
plt.show()`

export function Playground () {
  const [templates, setTemplates] = useState([])
  const [tpl, setTpl] = useState('code-interpreter-v1')
  const [sbx, setSbx] = useState(null)
  const [starting, setStarting] = useState(false)
  const [err, setErr] = useState('')
  const [cells, setCells] = useState([newCell('python', EXAMPLE)])

  useEffect(() => {
    api('GET', '/templates').then((l) => setTemplates(l || []), (e) => setErr(e.message))
  }, [])

  async function start () {
    setStarting(true)
    setErr('')
    try {
      const s = await Sandbox.create(tpl, sdkOpts({ timeoutMs: 15 * 60_000, metadata: { source: 'console-playground' } }))
      setSbx(s)
    } catch (e) { setErr(`creating a sandbox: ${e.message}`) } finally { setStarting(false) }
  }

  const update = (id, f) => setCells((cs) => cs.map((c) => (c.id === id ? { ...c, ...f(c) } : c)))

  async function run (cell) {
    if (!sbx) return
    update(cell.id, () => ({ out: [], results: [], error: null, running: true, ran: true }))
    const push = (stream) => (m) => update(cell.id, (c) => ({ out: [...c.out, { stream, text: m.line ?? String(m) }] }))
    try {
      const ex = await sbx.runCode(cell.code, {
        language: cell.language,
        onStdout: push('stdout'),
        onStderr: push('stderr'),
        onResult: (r) => update(cell.id, (c) => ({ results: [...c.results, r] })),
        timeoutMs: 5 * 60_000
      })
      update(cell.id, () => ({ error: ex.error || null, running: false }))
    } catch (e) {
      update(cell.id, () => ({ error: { name: 'Error', value: e.message, traceback: '' }, running: false }))
    }
  }

  return (
    <div>
      <h2>Playground</h2>
      <div class="toolbar">
        <label>Template <select id="template" value={tpl} onChange={(e) => setTpl(e.target.value)} disabled={!!sbx}>
          {templates.length === 0 && <option value={tpl}>{tpl}</option>}
          {templates.map((t) => { const n = (t.aliases && t.aliases[0]) || t.templateID; return <option value={n}>{n}</option> })}
        </select></label>
        {!sbx && <button id="start-sandbox" onClick={start} disabled={starting}>{starting ? 'Starting…' : 'Start sandbox'}</button>}
        {sbx && <span id="playground-sandbox">sandbox <a href={`#/sandboxes/${sbx.sandboxId}`}><code>{sbx.sandboxId}</code></a></span>}
        {sbx && <button onClick={() => { sbx.kill().catch(() => {}); setSbx(null) }}>Kill</button>}
      </div>
      {err && <div class="error">{err}</div>}
      {!sbx && <p class="muted">Start a sandbox from a template, then run cells in it. Python and JavaScript keep their state between cells; Bash runs in a persistent shell.</p>}
      {cells.map((c, i) => (
        <div class="cell" key={c.id} data-cell={i}>
          <div class="cell-head">
            <select class="cell-lang" value={c.language} onChange={(e) => update(c.id, () => ({ language: e.target.value }))}>
              <option value="python">Python</option><option value="js">JavaScript</option><option value="bash">Bash</option>
            </select>
            <button class="run" disabled={!sbx || c.running} onClick={() => run(c)}>{c.running ? 'Running…' : 'Run'}</button>
            <button class="link" onClick={() => setCells((cs) => cs.filter((x) => x.id !== c.id))}>remove</button>
          </div>
          <textarea class="cell-code" rows={Math.max(3, c.code.split('\n').length)} value={c.code} spellcheck={false}
            onInput={(e) => update(c.id, () => ({ code: e.target.value }))}
            onKeyDown={(e) => { if (e.key === 'Enter' && e.shiftKey) { e.preventDefault(); run({ ...c, code: e.target.value }) } }} />
          {(c.out.length > 0 || c.results.length > 0 || c.error) && (
            <div class="cell-out">
              {c.out.length > 0 && <pre class="stream">{c.out.map((o) => <span class={o.stream}>{o.text}</span>)}</pre>}
              {c.results.map((r) => <Result r={r} />)}
              {c.error && <pre class="cell-error">{stripANSI(`${c.error.name}: ${c.error.value}\n${c.error.traceback || ''}`)}</pre>}
            </div>
          )}
        </div>
      ))}
      <button id="add-cell" onClick={() => setCells((cs) => [...cs, newCell(cs.length ? cs[cs.length - 1].language : 'python')])}>+ Cell</button>
    </div>
  )
}
