import { api } from './api.js'

const enc = encodeURIComponent

/** Sandbox actions through the REST API. */
export const actions = {
  kill: (id) => api('DELETE', `/sandboxes/${enc(id)}`),
  // Extends by 5 minutes from the current end (the timeout is counted from now).
  extend: (sb, addSec = 300) => {
    const left = Math.max(0, Math.floor((new Date(sb.endAt).getTime() - Date.now()) / 1000))
    return api('POST', `/sandboxes/${enc(sb.sandboxID)}/timeout`, { timeout: left + addSec })
  },
  pause: (id) => api('POST', `/sandboxes/${enc(id)}/pause`),
  resume: (id) => api('POST', `/sandboxes/${enc(id)}/resume`, { timeout: 300 }),
  fork: (id) => api('POST', `/sandboxes/${enc(id)}/fork`, {})
}

/** Buttons for one sandbox; onDone(msg) after an action, onError(err). */
export function SandboxActions ({ sb, onDone, onError, compact }) {
  const run = (name, fn) => async () => {
    if (name === 'kill' && !compact && !confirm(`Kill sandbox ${sb.sandboxID}?`)) return
    try {
      await fn()
      onDone && onDone(`${name} ${sb.sandboxID}: done`)
    } catch (e) {
      onError && onError(new Error(`${name} ${sb.sandboxID}: ${e.message}`))
    }
  }
  const id = sb.sandboxID
  return (
    <span class="actions">
      {sb.state === 'running' && <button data-action="extend" onClick={run('extend', () => actions.extend(sb))} title="extend the timeout by 5 minutes">+5 min</button>}
      {sb.state === 'running' && <button data-action="pause" onClick={run('pause', () => actions.pause(id))}>Pause</button>}
      {sb.state === 'paused' && <button data-action="resume" onClick={run('resume', () => actions.resume(id))}>Resume</button>}
      {sb.state === 'running' && <button data-action="fork" onClick={run('fork', () => actions.fork(id))}>Fork</button>}
      <button data-action="kill" class="danger" onClick={run('kill', () => actions.kill(id))}>Kill</button>
    </span>
  )
}
