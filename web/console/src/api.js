// REST calls to the daemon (same origin) with the API key from the login page.
const KEY = 'airlock-api-key'

export const getKey = () => sessionStorage.getItem(KEY) || ''
export const setKey = (k) => sessionStorage.setItem(KEY, k)
export const clearKey = () => sessionStorage.removeItem(KEY)

/** Calls the daemon; throws an Error with the E2B error message on failure. */
export async function api (method, path, body) {
  return (await apiResponse(method, path, body)).data
}

/** As api, and the response's headers too: { data, headers }. */
export async function apiResponse (method, path, body) {
  const headers = { 'X-API-Key': getKey() }
  if (body !== undefined) headers['Content-Type'] = 'application/json'
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
  const text = await r.text()
  let data = null
  try { data = text ? JSON.parse(text) : null } catch { data = text }
  if (r.status === 401) {
    clearKey()
    window.dispatchEvent(new Event('airlock-logout'))
  }
  if (!r.ok) {
    const err = new Error((data && data.message) || `${r.status} ${r.statusText}`)
    err.status = r.status
    throw err
  }
  return { data, headers: r.headers }
}

/** Options for the E2B SDK: the daemon is both the API and the sandbox URL. */
export function sdkOpts (extra = {}) {
  return { apiKey: getKey(), apiUrl: location.origin, sandboxUrl: location.origin, requestTimeoutMs: 120_000, ...extra }
}

export function fmtBytes (n) {
  if (n == null || isNaN(n)) return '–'
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let i = 0
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++ }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${u[i]}`
}

export function fmtDuration (ms) {
  if (ms == null || isNaN(ms)) return '–'
  const neg = ms < 0
  let s = Math.floor(Math.abs(ms) / 1000)
  const h = Math.floor(s / 3600); s -= h * 3600
  const m = Math.floor(s / 60); s -= m * 60
  const out = h ? `${h}h ${m}m` : m ? `${m}m ${s}s` : `${s}s`
  return neg ? `-${out}` : out
}
