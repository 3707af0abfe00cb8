import { useEffect, useRef, useState } from 'preact/hooks'
import { api } from './api.js'
import { followSSE } from './sse.js'

const enc = encodeURIComponent
const RECENT = 20 // decisions kept in the "recent decisions" list
const DEFAULT_TIMEOUT_MS = 60_000 // the hook's deadline when the console turns it on

/**
 * Whether the console can turn the hook on or off with PUT
 * /sandboxes/{id}/network. PUT replaces the whole policy, and GET does not
 * echo secrets (rules' values, the egressProxy password, the webhook
 * secret), so the console only rewrites a policy it can send back whole:
 * allowOut, denyOut and allowInternetAccess. Returns "" when it can, else
 * why not.
 */
export function toggleRefusal (sb) {
  const n = sb.network || {}
  if (n.rules && (!Array.isArray(n.rules) || n.rules.length)) return 'the sandbox has network.rules, whose secret values GET does not show'
  if (n.egressProxy) return 'the sandbox has an egressProxy, whose password GET does not show'
  if (n.approval && n.approval.webhook) return 'the hook has a webhook, whose secret GET does not show'
  return ''
}

/** The PUT /sandboxes/{id}/network body that keeps sb's policy, approval replaced. */
export function networkWithApproval (sb, approval) {
  const n = sb.network || {}
  const body = {}
  if (n.allowOut && n.allowOut.length) body.allowOut = n.allowOut
  if (n.denyOut && n.denyOut.length) body.denyOut = n.denyOut
  if (sb.allowInternetAccess === false) body.allow_internet_access = false
  if (approval) body.approval = approval
  return body
}

const dest = (q) => `${q.address || q.ip}:${q.port}`
const secs = (ms) => `${Math.max(0, Math.ceil(ms / 1000))}s`

/** The answer's "remember" from a row's choice ("once", "sandbox", "minutes") and minutes. */
export function rememberOf (choice, minutes) {
  if (choice === 'sandbox') return 'sandbox'
  if (choice === 'minutes') {
    const m = Math.round(Number(minutes))
    if (!(m >= 1)) throw new Error('remember for N minutes: N must be a whole number of at least 1')
    return `${m}m`
  }
  return 'once'
}

/** One pending question: destination, age, countdown, Allow / Deny with a remember choice. */
function Pending ({ q, now, onAnswer, busy }) {
  const [choice, setChoice] = useState('once')
  const [minutes, setMinutes] = useState(10)
  const age = now - new Date(q.askedAt).getTime()
  const left = new Date(q.deadline).getTime() - now
  return (
    <tr class="approval-pending" data-decision={q.decisionId} data-address={q.address}>
      <td><code>{dest(q)}</code></td>
      <td>{q.domain || <span class="muted">–</span>}</td>
      <td>{q.protocol}</td>
      <td class="muted approval-age">{secs(age)}</td>
      <td class="approval-left" style={left < 5000 ? 'color: var(--danger)' : ''}>{left > 0 ? secs(left) : 'expiring'}</td>
      <td>
        <select class="approval-remember" value={choice} onChange={(e) => setChoice(e.currentTarget.value)}>
          <option value="once">this once</option>
          <option value="sandbox">for the sandbox's life</option>
          <option value="minutes">for N minutes</option>
        </select>
        {choice === 'minutes' && <input class="approval-minutes" type="number" min="1" value={minutes} style="width: 5em" onInput={(e) => setMinutes(e.currentTarget.value)} />}
      </td>
      <td class="actions">
        <button class="approval-allow" disabled={busy} onClick={() => onAnswer(q, 'allow', choice, minutes)}>Allow</button>
        <button class="approval-deny danger" disabled={busy} onClick={() => onAnswer(q, 'deny', choice, minutes)}>Deny</button>
      </td>
    </tr>
  )
}

/**
 * The approvals panel of a sandbox's page (the egress approval hook,
 * network.approval with stream: true): follows GET
 * /sandboxes/{id}/network/approvals, lists the pending questions with a
 * countdown to their deadline, answers them with POST
 * …/network/approvals/{decisionId}, and lists recent decisions from the
 * activity feed's egress.approval entries (whoever answered: the console, an
 * SDK, a webhook, the deadline). onPending gets the number pending (the
 * tab's count); onChanged is called after the console changed the hook.
 */
export function ApprovalsPanel ({ id, sb, visible = true, onPending, onChanged }) {
  const hook = (sb.network && sb.network.approval) || null
  const streaming = !!(hook && hook.stream)
  // The feed is followed while there is a stream hook (its entries drop rows
  // answered elsewhere, also while the tab is hidden) or the tab is shown.
  const feed = streaming || visible
  const [pending, setPending] = useState([])
  const [recent, setRecent] = useState([])
  const [state, setState] = useState('')
  const [feedState, setFeedState] = useState('')
  const [err, setErr] = useState('')
  const [busy, setBusy] = useState('')
  const [now, setNow] = useState(Date.now())
  const decided = useRef(new Set()) // decision ids answered or expired: never listed again

  const addRecent = (r) => setRecent((old) => {
    const rest = r.decisionId ? old.filter((o) => o.decisionId !== r.decisionId) : old
    return [r, ...rest].slice(0, RECENT)
  })
  const drop = (decisionId) => {
    decided.current.add(decisionId)
    setPending((old) => old.filter((q) => q.decisionId !== decisionId))
  }

  // The questions.
  useEffect(() => {
    setPending([])
    if (!streaming) { setState(''); return }
    return followSSE(`/sandboxes/${enc(id)}/network/approvals`, {
      onState: setState,
      onEvent: (ev) => {
        let q
        try { q = JSON.parse(ev.data) } catch { return }
        if (!q.decisionId || decided.current.has(q.decisionId)) return
        // A reopened stream sends the pending questions again: one row each.
        setPending((old) => old.some((o) => o.decisionId === q.decisionId) ? old : old.concat(q))
      }
    })
  }, [id, streaming])

  // Who decided what: the feed's egress.approval entries (backlog, then live).
  useEffect(() => {
    let last = 0
    setRecent([])
    if (!feed) { setFeedState(''); return }
    return followSSE(`/sandboxes/${enc(id)}/activity?types=egress.approval`, {
      lastId: () => last,
      onState: (s, status) => setFeedState(status === 501 ? 'the activity feed is off on this daemon: recent decisions show only the ones made here' : s),
      onEvent: (ev) => {
        if (ev.id) last = Number(ev.id)
        let e
        try { e = JSON.parse(ev.data) } catch { return }
        if (e.type === 'lagged') return false
        if (e.type !== 'egress.approval') return
        const d = e.data || {}
        if (d.decisionId) drop(d.decisionId)
        addRecent({ decisionId: d.decisionId, time: e.time, dest: dest(d), domain: d.domain, decision: d.decision, by: d.by, remember: d.remember, waitMs: d.waitMs })
      }
    })
  }, [id, feed])

  // The countdowns; a question past its deadline leaves the list (the hold
  // denied it: the feed's entry says so).
  useEffect(() => {
    if (!pending.length) return
    const t = setInterval(() => {
      const n = Date.now()
      setNow(n)
      for (const q of pending) {
        if (new Date(q.deadline).getTime() + 1000 < n) {
          drop(q.decisionId)
          if (feedState !== 'live') addRecent({ decisionId: q.decisionId, time: q.deadline, dest: dest(q), domain: q.domain, decision: 'deny', by: 'timeout' })
        }
      }
    }, 250)
    return () => clearInterval(t)
  }, [pending, feedState])

  useEffect(() => { onPending && onPending(pending.length) }, [pending.length])

  async function answer (q, decision, choice, minutes) {
    setErr('')
    let remember
    try { remember = rememberOf(choice, minutes) } catch (e) { setErr(e.message); return }
    setBusy(q.decisionId)
    try {
      // by: the feed's and the egress log's "by" name the console, not a stream client.
      await api('POST', `/sandboxes/${enc(id)}/network/approvals/${enc(q.decisionId)}`, remember === 'once' ? { decision, by: 'console' } : { decision, remember, by: 'console' })
      drop(q.decisionId)
      if (feedState !== 'live') addRecent({ decisionId: q.decisionId, time: new Date().toISOString(), dest: dest(q), domain: q.domain, decision, by: 'console', remember: remember === 'once' ? '' : remember })
    } catch (e) {
      setErr(`${decision} ${dest(q)}: ${e.message}`)
      if (e.status === 404) drop(q.decisionId) // answered elsewhere, or past its deadline
    } finally {
      setBusy('')
    }
  }

  async function setHook (on) {
    setErr('')
    setBusy('hook')
    try {
      await api('PUT', `/sandboxes/${enc(id)}/network`, networkWithApproval(sb, on ? { stream: true, timeoutMs: DEFAULT_TIMEOUT_MS } : null))
      onChanged && onChanged(on ? 'approvals on: new destinations wait for an answer here' : 'approvals off')
    } catch (e) {
      setErr(`${on ? 'turning approvals on' : 'turning approvals off'}: ${e.message}`)
    } finally {
      setBusy('')
    }
  }

  const refusal = toggleRefusal(sb)
  const running = sb.state === 'running'
  return (
    <div id="approvals">
      {!streaming
        ? (
          <p class="muted" id="approvals-off">
            {hook && hook.webhook
              ? <>This sandbox's approval hook is a webhook (<code>{hook.webhook.url}</code>): questions go there, not to the console. </>
              : <>Approvals are not enabled for this sandbox. </>}
            To answer here, give it <code>network.approval</code> with <code>{'{"stream": true, "timeoutMs": …}'}</code> at create or with <code>PUT /sandboxes/{'{id}'}/network</code>:
            new destinations its rules do not already allow then wait for an answer.
          </p>
          )
        : (
          <div class="toolbar">
            <span>new destinations wait up to <b>{secs(hook.timeoutMs || 5000)}</b> for an answer (none: denied)</span>
            <span id="approvals-state" class={'muted activity-state ' + (state === 'live' ? 'live' : '')}>{state}</span>
          </div>
          )}
      {running && !refusal && (
        streaming
          ? <button id="approvals-disable" disabled={busy === 'hook'} onClick={() => setHook(false)}>Turn approvals off</button>
          : !(hook && hook.webhook) && <button id="approvals-enable" disabled={busy === 'hook'} onClick={() => setHook(true)}>Turn approvals on (answer here, {secs(DEFAULT_TIMEOUT_MS)} deadline)</button>
      )}
      {running && refusal && <p class="muted" id="approvals-no-toggle">The console does not change this hook: {refusal}.</p>}
      {err && <div class="error" id="approvals-error">{err}</div>}
      {streaming && (pending.length === 0
        ? <p class="muted" id="approvals-empty">no pending questions</p>
        : (
          <table class="table" id="approvals-pending">
            <thead><tr><th>destination</th><th>domain</th><th>protocol</th><th>age</th><th>deadline in</th><th>remember</th><th>answer</th></tr></thead>
            <tbody>{pending.map((q) => <Pending q={q} now={now} busy={busy === q.decisionId} onAnswer={answer} />)}</tbody>
          </table>
          ))}
      <h3>Recent decisions</h3>
      {feedState && feedState !== 'live' && <p class="muted" id="approvals-feed-state">{feedState}</p>}
      {recent.length === 0
        ? <p class="muted" id="approvals-recent-empty">none yet</p>
        : (
          <table class="table" id="approvals-recent">
            <thead><tr><th>time</th><th>destination</th><th>decision</th><th>by</th><th>remembered</th><th>waited</th></tr></thead>
            <tbody>
              {recent.map((r) => (
                <tr class={'approval-decision ' + (r.decision === 'deny' ? 'denied' : '')} data-decision={r.decisionId || ''} data-verdict={r.decision}>
                  <td class="muted">{new Date(r.time).toLocaleTimeString()}</td>
                  <td><code>{r.dest}</code>{r.domain ? ` (${r.domain})` : ''}</td>
                  <td><span class="tag">{r.decision}</span></td>
                  <td>{r.by || ''}</td>
                  <td>{r.remember || 'no'}</td>
                  <td class="muted">{r.waitMs != null ? `${r.waitMs} ms` : ''}</td>
                </tr>
              ))}
            </tbody>
          </table>
          )}
    </div>
  )
}
