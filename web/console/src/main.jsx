import { render } from 'preact'
import { useEffect, useState } from 'preact/hooks'
import { api, getKey, setKey, clearKey } from './api.js'
import { Overview } from './Overview.jsx'
import { Sandboxes } from './Sandboxes.jsx'
import { SandboxPage } from './SandboxPage.jsx'
import { Playground } from './Playground.jsx'
import { Templates } from './Templates.jsx'
import { Nodes } from './Nodes.jsx'
import { Volumes } from './Volumes.jsx'
import './style.css'

function useHash () {
  const [hash, setHash] = useState(location.hash || '#/')
  useEffect(() => {
    const on = () => setHash(location.hash || '#/')
    window.addEventListener('hashchange', on)
    return () => window.removeEventListener('hashchange', on)
  }, [])
  return hash
}

function Login ({ onLogin }) {
  const [key, setK] = useState('')
  const [err, setErr] = useState('')
  const [busy, setBusy] = useState(false)
  async function submit (e) {
    e.preventDefault()
    setBusy(true)
    setErr('')
    setKey(key.trim())
    try {
      await api('GET', '/console/api/overview')
      onLogin()
    } catch (e) {
      clearKey()
      setErr(e.status === 401 ? 'That API key is not valid for this daemon.' : e.message)
    } finally {
      setBusy(false)
    }
  }
  return (
    <div class="login">
      <form onSubmit={submit} class="card">
        <h1>Airlock console</h1>
        <p class="muted">Enter the daemon's API key (printed by <code>airlock serve</code>, also in <code>&lt;data-dir&gt;/api-key</code>).
          It is kept in this tab's session storage only.</p>
        <input id="api-key" type="password" placeholder="e2b_…" value={key} onInput={(e) => setK(e.target.value)} autofocus />
        <button id="login" type="submit" disabled={busy || !key.trim()}>Log in</button>
        {err && <div class="error" id="login-error">{err}</div>}
      </form>
    </div>
  )
}

const NAV = [
  ['#/', 'Overview'],
  ['#/sandboxes', 'Sandboxes'],
  ['#/playground', 'Playground'],
  ['#/templates', 'Templates'],
  ['#/volumes', 'Volumes']
]

/** Whether the daemon is a cluster's api tier: GET /airlock/v1/nodes
 *  answers there, a single host says 404. null until known; asked again
 *  after other failures. */
function useCluster (authed) {
  const [cluster, setCluster] = useState(null)
  useEffect(() => {
    if (!authed) return
    let stop = false
    let timer
    const probe = () => api('GET', '/airlock/v1/nodes').then(
      () => { if (!stop) setCluster(true) },
      (e) => {
        if (stop) return
        if (e.status === 404) setCluster(false)
        else timer = setTimeout(probe, 5000)
      })
    probe()
    return () => { stop = true; clearTimeout(timer) }
  }, [authed])
  return cluster
}

function App () {
  const [authed, setAuthed] = useState(!!getKey())
  const hash = useHash()
  const cluster = useCluster(authed)
  useEffect(() => {
    const out = () => setAuthed(false)
    window.addEventListener('airlock-logout', out)
    return () => window.removeEventListener('airlock-logout', out)
  }, [])
  if (!authed) return <Login onLogin={() => setAuthed(true)} />
  const path = hash.slice(1)
  let page
  let m
  if ((m = path.match(/^\/sandboxes\/([^/]+)$/))) page = <SandboxPage id={decodeURIComponent(m[1])} key={m[1]} />
  else if (path.startsWith('/sandboxes')) page = <Sandboxes cluster={cluster} />
  else if (path.startsWith('/nodes') && cluster !== false) page = cluster ? <Nodes /> : 'Loading…'
  else if (path.startsWith('/playground')) page = <Playground />
  else if (path.startsWith('/templates')) page = <Templates />
  else if (path.startsWith('/volumes')) page = <Volumes />
  else page = <Overview />
  const active = (h) => (h === '#/' ? path === '/' || path === '' : ('#' + path).startsWith(h))
  return (
    <div class="layout">
      <nav>
        <div class="brand">Airlock</div>
        {(cluster ? [...NAV.slice(0, 2), ['#/nodes', 'Nodes'], ...NAV.slice(2)] : NAV).map(([h, label]) => <a href={h} class={active(h) ? 'active' : ''} id={'nav-' + label.toLowerCase()}>{label}</a>)}
        <div class="spacer" />
        <button class="link" id="logout" onClick={() => { clearKey(); setAuthed(false) }}>Log out</button>
      </nav>
      <main>{page}</main>
    </div>
  )
}

render(<App />, document.getElementById('app'))
