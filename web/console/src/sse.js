import { clearKey, getKey } from './api.js'

const MAX_BACKOFF = 10_000

/**
 * Follows a server-sent events endpoint of the daemon with fetch (the API
 * key in a header, never in the URL), reopening it on a drop with a growing
 * backoff. onEvent gets each {id, event, data}; onState a status
 * ("connecting", "live", "retrying in Ns", or an error text). lastId, when
 * given, returns the Last-Event-ID to reopen from. 404, 400 and 501 end it
 * (a sandbox that is gone, a hook or feed that is off). Returns a stop
 * function.
 */
export function followSSE (path, { onEvent, onState, lastId }) {
  const ctl = new AbortController()
  let backoff = 500
  ;(async () => {
    while (!ctl.signal.aborted) {
      onState('connecting')
      try {
        const headers = { 'X-API-Key': getKey(), Accept: 'text/event-stream' }
        const last = lastId && lastId()
        if (last) headers['Last-Event-ID'] = String(last)
        const r = await fetch(path, { headers, signal: ctl.signal })
        if (r.status === 401) {
          clearKey()
          window.dispatchEvent(new Event('airlock-logout'))
          return
        }
        if (!r.ok) {
          let msg = `${r.status} ${r.statusText}`
          try { msg = (await r.json()).message || msg } catch {}
          if (r.status === 404 || r.status === 400 || r.status === 501) { onState(msg, r.status); return }
          throw new Error(msg)
        }
        onState('live')
        backoff = 500
        for await (const ev of sseEvents(r.body)) {
          if (ev.data && onEvent(ev) === false) break // the caller asks to reconnect
        }
      } catch (e) {
        if (ctl.signal.aborted) return
        onState(`stream: ${e.message}`)
      }
      if (ctl.signal.aborted) return
      onState(`retrying in ${Math.round(backoff / 100) / 10}s`)
      await new Promise((resolve) => setTimeout(resolve, backoff))
      backoff = Math.min(backoff * 2, MAX_BACKOFF)
    }
  })()
  return () => ctl.abort()
}

/** Parses a text/event-stream body into {id, event, data} records. */
export async function * sseEvents (body) {
  const reader = body.getReader()
  const dec = new TextDecoder()
  let buf = ''
  let cur = { id: '', event: '', data: [] }
  try {
    for (;;) {
      const { value, done } = await reader.read()
      if (done) return
      buf += dec.decode(value, { stream: true })
      let i
      while ((i = buf.search(/\r\n|\r|\n/)) >= 0) {
        const line = buf.slice(0, i)
        buf = buf.slice(buf[i] === '\r' && buf[i + 1] === '\n' ? i + 2 : i + 1)
        if (line === '') {
          if (cur.data.length || cur.id) yield { id: cur.id, event: cur.event, data: cur.data.join('\n') }
          cur = { id: '', event: '', data: [] }
          continue
        }
        if (line.startsWith(':')) continue // a comment (": ping")
        const c = line.indexOf(':')
        const field = c < 0 ? line : line.slice(0, c)
        let v = c < 0 ? '' : line.slice(c + 1)
        if (v.startsWith(' ')) v = v.slice(1)
        if (field === 'data') cur.data.push(v)
        else if (field === 'id') cur.id = v
        else if (field === 'event') cur.event = v
      }
    }
  } finally {
    reader.releaseLock()
  }
}
