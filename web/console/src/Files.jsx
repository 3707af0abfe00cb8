import { useEffect, useState } from 'preact/hooks'
import { fmtBytes } from './api.js'

/** Browses a sandbox's files through the E2B SDK (sbx = connected Sandbox). */
export function Files ({ sbx }) {
  const [dir, setDir] = useState('/home/user')
  // The path being typed; dir follows it on Enter or blur (the page re-renders every few
  // seconds, which must not reset a half-typed path).
  const [dirDraft, setDirDraft] = useState('/home/user')
  useEffect(() => setDirDraft(dir), [dir])
  const [entries, setEntries] = useState(null)
  const [err, setErr] = useState('')
  const [msg, setMsg] = useState('')
  const [over, setOver] = useState(false)
  const [tick, setTick] = useState(0)

  useEffect(() => {
    let stop = false
    setEntries(null)
    sbx.files.list(dir).then((l) => {
      if (stop) return
      l.sort((a, b) => (a.type === b.type ? a.name.localeCompare(b.name) : a.type === 'dir' ? -1 : 1))
      setEntries(l)
      setErr('')
    }, (e) => !stop && setErr(e.message))
    return () => { stop = true }
  }, [sbx, dir, tick])

  const join = (name) => (dir.endsWith('/') ? dir : dir + '/') + name
  const up = () => setDir(dir.replace(/\/[^/]+\/?$/, '') || '/')

  async function download (e) {
    try {
      const blob = await sbx.files.read(e.path, { format: 'blob' })
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
        await sbx.files.write(join(f.name), await f.arrayBuffer())
        setMsg(`uploaded ${f.name} to ${dir}`)
      } catch (e) { setErr(`upload ${f.name}: ${e.message}`) }
    }
    setTick((t) => t + 1)
  }

  return (
    <div class={`files ${over ? 'dragover' : ''}`} id="files"
      onDragOver={(e) => { e.preventDefault(); setOver(true) }}
      onDragLeave={() => setOver(false)}
      onDrop={(e) => { e.preventDefault(); setOver(false); upload([...e.dataTransfer.files]) }}>
      <div class="toolbar">
        <button onClick={up} disabled={dir === '/'}>Up</button>
        <input id="files-path" value={dirDraft} onInput={(e) => setDirDraft(e.target.value)} onChange={(e) => setDir(e.target.value || '/')} />
        <button onClick={() => setTick((t) => t + 1)}>Refresh</button>
        <label class="button">Upload<input id="files-upload" type="file" multiple hidden onChange={(e) => upload([...e.target.files])} /></label>
      </div>
      <div class="muted">Drop files here to upload them into {dir}.</div>
      {msg && <div class="info">{msg}</div>}
      {err && <div class="error">{err}</div>}
      {!entries ? 'Loading…' : (
        <table class="table" id="files-table">
          <thead><tr><th>Name</th><th>Size</th><th>Modified</th><th /></tr></thead>
          <tbody>
            {entries.map((e) => (
              <tr key={e.path} data-file={e.name}>
                <td>{e.type === 'dir' ? <a href="javascript:void 0" onClick={() => setDir(e.path)}>{e.name}/</a> : e.name}</td>
                <td>{e.type === 'dir' ? '' : fmtBytes(e.size)}</td>
                <td>{e.modifiedTime ? new Date(e.modifiedTime).toLocaleString() : ''}</td>
                <td>{e.type !== 'dir' && <button onClick={() => download(e)}>Download</button>}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  )
}
