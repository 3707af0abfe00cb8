// Prints p50/p99 of each step of the cross-node resumes and of the pauses
// in a cluster's node logs (bench/pause/run.sh keeps them per binary):
//   node bench/pause/breakdown.mjs LOGDIR LABEL
// Steps: from "moved sandbox resumed" (fetch, fetch_waited, prepare,
// restore, elapsed), "artifacts: tree fetched" (download_verify, unpack),
// "artifacts: image fetched" (version 2 images: tree_took, files_took,
// elapsed), "sandbox resumed" (a same-node resume: restore, elapsed),
// "sandbox paused" (elapsed) and the background upload (elapsed).
import { readdirSync, readFileSync } from 'node:fs'

const [dir, label = dir] = process.argv.slice(2)
const dur = (s) => {
  const m = /^([\d.]+)(ns|µs|us|ms|s|m)$/.exec(s)
  if (!m) return NaN
  return Number(m[1]) * { ns: 1e-6, µs: 1e-3, us: 1e-3, ms: 1, s: 1e3, m: 6e4 }[m[2]]
}
const steps = {}
const add = (k, v) => { if (!Number.isNaN(v)) (steps[k] ??= []).push(v) }
const files = readdirSync(dir).filter((f) => /^n\d+\.log$/.test(f))
// The sandboxes resumed on their own node too (pause.mjs's S1): their
// resume elsewhere is compared with that same-node resume. The others (S2)
// were resumed elsewhere at once after their pause.
const local = new Set()
for (const f of files) for (const m of readFileSync(`${dir}/${f}`, 'utf8').matchAll(/msg="sandbox resumed" \S+ sandbox=(\S+)/g)) local.add(m[1])
for (const f of files) {
  const bare = {} // sandbox id → the last bare `runsc restore` (debug log)
  for (const line of readFileSync(`${dir}/${f}`, 'utf8').split('\n')) {
    const kv = Object.fromEntries([...line.matchAll(/(\w+)=("[^"]*"|\S+)/g)].map((m) => [m[1], m[2].replace(/^"|"$/g, '')]))
    // With --log-level debug: each step of a resume (kind memory: same
    // node; imported: another node's image) and the runtime's own restore.
    if (kv.msg === 'sandbox restored' && kv.id) bare[kv.id] = dur(kv.took ?? '')
    if (kv.msg === 'step' && kv.op === 'resume') {
      const where = kv.kind === 'imported' ? 'cross-node' : 'same-node'
      add(`${where} step ${kv.step}`, dur(kv.elapsed ?? ''))
      if (kv.step === 'restore' && bare[kv.sandbox] !== undefined) {
        add(`${where} bare runsc restore`, bare[kv.sandbox])
        if (where === 'cross-node') add(`cross-node bare runsc restore (${local.has(kv.sandbox) ? 'S1, also resumed on its node' : 'S2, at once'})`, bare[kv.sandbox])
        delete bare[kv.sandbox]
      }
    }
    if (kv.msg === 'moved sandbox resumed') for (const k of ['fetch', 'fetch_waited', 'prepare', 'restore', 'elapsed']) add(`resume ${k}`, dur(kv[k] ?? ''))
    else if (kv.msg === 'artifacts: tree fetched' && kv.key) { add('fetch tree download+verify', dur(kv.download_verify ?? '')); add('fetch tree unpack', dur(kv.unpack ?? '')) }
    else if (kv.msg === 'artifacts: image fetched') { add('fetch tree (v2)', dur(kv.tree_took ?? '')); add('fetch files (v2)', dur(kv.files_took ?? '')); add('fetch image (v2)', dur(kv.elapsed ?? '')) }
    else if (kv.msg === 'sandbox resumed') { add('same-node resume restore', dur(kv.restore ?? '')); add('same-node resume (node)', dur(kv.elapsed ?? '')) }
    else if (kv.msg === 'sandbox paused') add('pause (node)', dur(kv.elapsed ?? ''))
    else if (kv.msg === "paused sandbox's image uploaded in the background" || kv.msg === 'paused sandbox uploaded') add('upload', dur(kv.elapsed ?? ''))
  }
}
const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] }
console.log(`${label}: ` + Object.entries(steps).map(([k, xs]) => `${k} ${Math.round(pct(xs, 50))}/${Math.round(pct(xs, 99))} ms (n=${xs.length})`).join('; '))
