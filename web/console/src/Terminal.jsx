import { useEffect, useRef, useState } from 'preact/hooks'
import { Terminal as XTerm } from '@xterm/xterm'
import { FitAddon } from '@xterm/addon-fit'
import '@xterm/xterm/css/xterm.css'
import { getKey } from './api.js'

/** A shell in the sandbox: xterm.js over the daemon's PTY WebSocket. */
export function Terminal ({ id }) {
  const box = useRef(null)
  const [status, setStatus] = useState('connecting…')
  useEffect(() => {
    const term = new XTerm({ cursorBlink: true, fontSize: 13, convertEol: false, theme: { background: '#111827' } })
    const fit = new FitAddon()
    term.loadAddon(fit)
    term.open(box.current)
    try { fit.fit() } catch {}
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:'
    const ws = new WebSocket(`${proto}//${location.host}/console/api/sandboxes/${encodeURIComponent(id)}/pty`)
    ws.binaryType = 'arraybuffer'
    const enc = new TextEncoder()
    ws.onopen = () => {
      ws.send(JSON.stringify({ type: 'auth', key: getKey(), cols: term.cols, rows: term.rows }))
      setStatus('connected')
      term.focus()
    }
    ws.onmessage = (ev) => {
      if (typeof ev.data === 'string') {
        const m = JSON.parse(ev.data)
        if (m.type === 'exit') setStatus(`shell exited (code ${m.exitCode})`)
        return
      }
      term.write(new Uint8Array(ev.data))
    }
    ws.onclose = (ev) => setStatus((s) => (s.startsWith('shell exited') ? s : `disconnected${ev.reason ? ': ' + ev.reason : ''} (${ev.code})`))
    const onData = term.onData((d) => { if (ws.readyState === WebSocket.OPEN) ws.send(enc.encode(d)) })
    const onResize = term.onResize(({ cols, rows }) => { if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: 'resize', cols, rows })) })
    const refit = () => { try { fit.fit() } catch {} }
    window.addEventListener('resize', refit)
    return () => {
      window.removeEventListener('resize', refit)
      onData.dispose(); onResize.dispose()
      ws.close()
      term.dispose()
    }
  }, [id])
  return (
    <div>
      <div class="muted" id="terminal-status">Terminal: {status}</div>
      <div class="terminal" id="terminal" ref={box} />
    </div>
  )
}
