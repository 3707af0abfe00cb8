// Prints the median of each step of the cross-node resumes and of the pauses
// in a cluster's node logs (bench/pause/run.sh keeps them per binary):
//   node bench/pause/breakdown.mjs LOGDIR LABEL
// Steps: from "moved sandbox resumed" (fetch, fetch_waited, prepare,
// restore, elapsed), "artifacts: tree fetched" (download_verify, unpack),
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
for (const f of readdirSync(dir).filter((f) => /^n\d+\.log$/.test(f))) {
  for (const line of readFileSync(`${dir}/${f}`, 'utf8').split('\n')) {
    const kv = Object.fromEntries([...line.matchAll(/(\w+)=("[^"]*"|\S+)/g)].map((m) => [m[1], m[2].replace(/^"|"$/g, '')]))
    if (kv.msg === 'moved sandbox resumed') for (const k of ['fetch', 'fetch_waited', 'prepare', 'restore', 'elapsed']) add(`resume ${k}`, dur(kv[k] ?? ''))
    else if (kv.msg === 'artifacts: tree fetched' && kv.key) { add('fetch download+verify', dur(kv.download_verify ?? '')); add('fetch unpack', dur(kv.unpack ?? '')) }
    else if (kv.msg === 'sandbox paused') add('pause (node)', dur(kv.elapsed ?? ''))
    else if (kv.msg === "paused sandbox's image uploaded in the background" || kv.msg === 'paused sandbox uploaded') add('upload', dur(kv.elapsed ?? ''))
  }
}
const med = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor((s.length - 1) / 2)] }
console.log(`${label}: ` + Object.entries(steps).map(([k, xs]) => `${k} ${Math.round(med(xs))} ms (n=${xs.length})`).join('; '))
