import { marked } from 'marked'

/**
 * Untrusted HTML from a sandbox, in an iframe without scripts
 * (sandbox="allow-same-origin" only lets the console measure its height).
 */
function SafeHTML ({ html, cls }) {
  // Shrink first: the document's scrollHeight is at least the frame's height.
  const size = (f) => {
    try {
      f.style.height = '1px'
      f.style.height = Math.min(600, f.contentDocument.documentElement.scrollHeight + 4) + 'px'
    } catch {}
  }
  const doc = `<!doctype html><meta charset="utf-8"><style>body{font:13px system-ui,sans-serif;margin:4px}table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:2px 6px}th{background:#f3f4f6}</style>${html}`
  return <iframe class={`rich ${cls}`} sandbox="allow-same-origin" srcdoc={doc} onLoad={(e) => size(e.currentTarget)} />
}

/** One rich result of a code cell (E2B Result), best format first. */
export function Result ({ r }) {
  if (r.png) return <img class="result-img" alt="png result" src={`data:image/png;base64,${r.png}`} />
  if (r.jpeg) return <img class="result-img" alt="jpeg result" src={`data:image/jpeg;base64,${r.jpeg}`} />
  if (r.svg) return <img class="result-img" alt="svg result" src={`data:image/svg+xml;charset=utf-8,${encodeURIComponent(r.svg)}`} />
  if (r.html) return <SafeHTML cls="result-html" html={r.html} />
  if (r.markdown) return <SafeHTML cls="result-markdown" html={marked.parse(r.markdown)} />
  if (r.json !== undefined && r.json !== null) return <pre class="result-json">{JSON.stringify(r.json, null, 2)}</pre>
  if (r.latex) return <pre class="result-text">{r.latex}</pre>
  if (r.text !== undefined) return <pre class="result-text">{r.text}</pre>
  return null
}
