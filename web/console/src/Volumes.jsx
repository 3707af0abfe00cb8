import { useEffect, useState } from 'preact/hooks'
import { api, fmtBytes } from './api.js'

/** The volumes (E2B's /volumes plus Airlock's sizeMB, usedBytes and
 *  mountedBy): size limit, use, the sandboxes that mount each; create,
 *  delete, and a file browser per volume. */
export function Volumes () {
  const [list, setList] = useState(null)
  const [err, setErr] = useState('')
  const [tick, setTick] = useState(0)
  const [open, setOpen] = useState('')
  const [name, setName] = useState('')
  const [size, setSize] = useState('')
  const [busy, setBusy] = useState(false)
  useEffect(() => {
    let stop = false
    api('GET', '/volumes').then((l) => { if (!stop) { setList(l); setErr('') } }, (e) => !stop && setErr(e.message))
    return () => { stop = true }
  }, [tick])

  async function create (e) {
    e.preventDefault()
    setBusy(true)
    setErr('')
    try {
      const body = { name: name.trim() }
      if (size.trim()) body.sizeMB = Number(size)
      await api('POST', '/volumes', body)
      setName('')
      setSize('')
      setTick((t) => t + 1)
    } catch (e) { setErr(`create ${name}: ${e.message}`) } finally { setBusy(false) }
  }

  async function remove (v) {
    const mounted = (v.mountedBy || []).length
    if (!confirm(`Delete volume ${v.name} and all its files?${mounted ? ` ${mounted} sandbox(es) mount it; their mount becomes empty.` : ''}`)) return
    try {
      await api('DELETE', `/volumes/${encodeURIComponent(v.volumeID)}`)
      if (open === v.volumeID) setOpen('')
      setTick((t) => t + 1)
    } catch (e) { setErr(`delete ${v.name}: ${e.message}`) }
  }

  return (
    <div>
      <h2>Volumes</h2>
      <p class="muted">Persistent directories that sandboxes mount (<code>volumeMounts</code> on create, <code>airlock create --volume NAME:/path[:ro]</code>).</p>
      {err && <div class="error" id="volumes-error">{err}</div>}
      <form class="toolbar" id="volume-create" onSubmit={create}>
        <input id="volume-name" placeholder="name (letters, digits, _ and -)" value={name} onInput={(e) => setName(e.target.value)} />
        <input id="volume-size" placeholder="size limit, MiB (default)" value={size} onInput={(e) => setSize(e.target.value)} />
        <button type="submit" id="volume-create-button" disabled={busy || !name.trim()}>Create volume</button>
        <button type="button" onClick={() => setTick((t) => t + 1)}>Refresh</button>
      </form>
      {!list ? 'Loading…' : list.length === 0 ? <div class="muted" id="volumes-empty">No volumes yet.</div> : (
        <table class="table" id="volumes">
          <thead><tr><th>Name</th><th>ID</th><th>Size limit</th><th>Used</th><th>Mounted by</th><th /></tr></thead>
          <tbody>
            {list.map((v) => [
              <tr key={v.volumeID} data-volume={v.name}>
                <td>{v.name}</td>
                <td><code>{v.volumeID}</code></td>
                <td class="volume-size">{v.sizeMB ? fmtBytes(v.sizeMB * 1048576) : '–'}</td>
                <td class="volume-used">{v.usedBytes == null ? '–' : fmtBytes(v.usedBytes)}</td>
                <td class="volume-mounted-by">{(v.mountedBy || []).length === 0 ? '–' : v.mountedBy.map((id) => <a key={id} href={`#/sandboxes/${encodeURIComponent(id)}`}><code>{id}</code> </a>)}</td>
                <td>
                  <button type="button" class="volume-browse" onClick={() => setOpen(open === v.volumeID ? '' : v.volumeID)}>{open === v.volumeID ? 'Close' : 'Files'}</button>
                  <button type="button" class="volume-delete" onClick={() => remove(v)}>Delete</button>
                </td>
              </tr>,
              open === v.volumeID && (
                <tr key={`${v.volumeID}-files`} class="volume-detail">
                  <td colSpan={6}><VolumeFiles id={v.volumeID} onChange={() => setTick((t) => t + 1)} /></td>
                </tr>
              )
            ])}
          </tbody>
        </table>
      )}
    </div>
  )
}

/** Calls the volume content API with the volume's token (which GET
 *  /volumes/{id} gives for the API key); returns the Response. */
async function content (tok, method, op, path, body, query = {}) {
  const q = new URLSearchParams({ path, ...query })
  const r = await fetch(`/volumecontent/${encodeURIComponent(tok.volumeID)}/${op}?${q}`, {
    method,
    headers: { Authorization: `Bearer ${tok.token}`, ...(body !== undefined ? { 'Content-Type': 'application/octet-stream' } : {}) },
    body
  })
  if (!r.ok) {
    let msg = `${r.status} ${r.statusText}`
    try { msg = (await r.json()).message || msg } catch {}
    throw new Error(msg)
  }
  return r
}

/** Browses one volume: list a directory, download, upload, delete. */
function VolumeFiles ({ id, onChange }) {
  const [tok, setTok] = useState(null)
  const [dir, setDir] = useState('/')
  const [entries, setEntries] = useState(null)
  const [err, setErr] = useState('')
  const [msg, setMsg] = useState('')
  const [tick, setTick] = useState(0)
  const [over, setOver] = useState(false)

  useEffect(() => {
    api('GET', `/volumes/${encodeURIComponent(id)}`).then(setTok, (e) => setErr(e.message))
  }, [id])
  useEffect(() => {
    if (!tok) return
    let stop = false
    setEntries(null)
    content(tok, 'GET', 'dir', dir).then((r) => r.json()).then((l) => {
      if (stop) return
      l.sort((a, b) => (a.type === b.type ? a.name.localeCompare(b.name) : a.type === 'directory' ? -1 : 1))
      setEntries(l)
      setErr('')
    }, (e) => !stop && setErr(`${dir}: ${e.message}`))
    return () => { stop = true }
  }, [tok, dir, tick])

  const join = (name) => (dir.endsWith('/') ? dir : dir + '/') + name
  const up = () => setDir(dir.replace(/\/[^/]+\/?$/, '') || '/')
  const refresh = () => { setTick((t) => t + 1); onChange() }

  async function download (e) {
    try {
      const blob = await (await content(tok, 'GET', 'file', e.path)).blob()
      const a = document.createElement('a')
      a.href = URL.createObjectURL(blob)
      a.download = e.name
      a.click()
      setTimeout(() => URL.revokeObjectURL(a.href), 10_000)
    } catch (err) { setErr(`download ${e.path}: ${err.message}`) }
  }

  async function upload (files) {
    setErr('')
    for (const f of files) {
      try {
        setMsg(`uploading ${f.name} (${fmtBytes(f.size)})…`)
        await content(tok, 'PUT', 'file', join(f.name), f, { force: 'true' })
        setMsg(`uploaded ${f.name} to ${dir}`)
      } catch (e) { setErr(`upload ${f.name}: ${e.message}`) }
    }
    refresh()
  }

  async function remove (e) {
    if (!confirm(`Delete ${e.path}${e.type === 'directory' ? ' and everything in it' : ''}?`)) return
    try {
      await content(tok, 'DELETE', 'path', e.path)
      setMsg(`deleted ${e.path}`)
    } catch (err) { setErr(`delete ${e.path}: ${err.message}`) }
    refresh()
  }

  async function mkdir () {
    const name = prompt('New directory name')
    if (!name) return
    try {
      await content(tok, 'POST', 'dir', join(name), undefined, { force: 'true' })
    } catch (e) { setErr(`mkdir ${name}: ${e.message}`) }
    refresh()
  }

  return (
    <div class={`files ${over ? 'dragover' : ''}`} id="volume-files" data-volume-id={id}
      onDragOver={(e) => { e.preventDefault(); setOver(true) }}
      onDragLeave={() => setOver(false)}
      onDrop={(e) => { e.preventDefault(); setOver(false); upload([...e.dataTransfer.files]) }}>
      <div class="toolbar">
        <button type="button" onClick={up} disabled={dir === '/'}>Up</button>
        <code id="volume-files-path">{dir}</code>
        <button type="button" onClick={refresh}>Refresh</button>
        <button type="button" id="volume-mkdir" onClick={mkdir}>New folder</button>
        <label class="button">Upload<input id="volume-upload" type="file" multiple hidden onChange={(e) => { const files = [...e.target.files]; e.target.value = ''; upload(files) }} /></label>
      </div>
      {msg && <div class="info" id="volume-files-msg">{msg}</div>}
      {err && <div class="error" id="volume-files-error">{err}</div>}
      {!entries ? 'Loading…' : (
        <table class="table" id="volume-files-table">
          <thead><tr><th>Name</th><th>Size</th><th>Mode</th><th>Modified</th><th /></tr></thead>
          <tbody>
            {entries.map((e) => (
              <tr key={e.path} data-file={e.name}>
                <td>{e.type === 'directory' ? <a href="javascript:void 0" class="volume-dir" onClick={() => setDir(e.path)}>{e.name}/</a> : e.name}</td>
                <td>{e.type === 'directory' ? '' : fmtBytes(e.size)}</td>
                <td><code>{(e.mode & 0o7777).toString(8).padStart(4, '0')}</code></td>
                <td>{e.mtime ? new Date(e.mtime).toLocaleString() : ''}</td>
                <td>
                  {e.type === 'file' && <button type="button" class="volume-download" onClick={() => download(e)}>Download</button>}
                  <button type="button" class="volume-file-delete" onClick={() => remove(e)}>Delete</button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  )
}
