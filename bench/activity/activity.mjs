#!/usr/bin/env node
// Activity feed overhead (issue 28): the same workloads in three sandboxes
// in one run, rounds interleaved so the host's noise falls on all three:
//   off     a daemon with the feed off (--activity-max-entries 0)
//   on      a daemon with the feed on, nobody listening (egress and process
//           entries recorded; no file watch)
//   listen  the same daemon, one client following the SSE stream (file
//           watch on)
//   listen-nf  the same, the client asking for egress and process entries
//           only (no file watch)
//   floor   (FLOOR=1) the feed-off daemon, with a process in the sandbox
//           holding an inotify watch on /home/user and /tmp (and the new
//           directories below) that reads its events 20 ms apart and sends
//           nothing: what the kernel's events cost with no feed at all
// Workloads: a command round trip (`true`), a file-heavy command (200 file
// writes and a delete under /home/user) and a connection-heavy one (20 curl
// connection attempts to TARGET, which answers with a reset).
//
// Environment: OFF_URL, ON_URL, API_KEY (both daemons), TARGET (ip:port),
// ROUNDS (5), RT_N (20 per round), HEAVY_N (3 per round), FLOOR (unset),
// WORK (all; else comma-separated first words of workloads: files,conns).
import { loadSDK } from '../sdk.mjs'
import { floorWatcher } from './floor.mjs'

const { Sandbox } = await loadSDK('e2b')
const key = process.env.API_KEY
const target = process.env.TARGET
const ROUNDS = Number(process.env.ROUNDS || 5)
const RT_N = Number(process.env.RT_N || 20)
const HEAVY_N = Number(process.env.HEAVY_N || 3)

const opts = (url) => ({ apiKey: key, apiUrl: url, sandboxUrl: url, timeoutMs: 600_000 })
const modes = [
  { name: 'off', url: process.env.OFF_URL },
  { name: 'on', url: process.env.ON_URL },
  { name: 'listen', url: process.env.ON_URL, listen: '' },
  { name: 'listen-nf', url: process.env.ON_URL, listen: '?types=egress,process' }
]
if (process.env.FLOOR) modes.push({ name: 'floor', url: process.env.OFF_URL, floor: true })
const work = {
  'round trip (true)': { n: RT_N, cmd: 'true' },
  'files (200 writes)': { n: HEAVY_N, cmd: 'mkdir -p /home/user/w && cd /home/user/w && for i in $(seq 200); do echo x > f$i; echo y >> f$i; done; cd / && rm -rf /home/user/w' },
  'conns (20 curls)': { n: HEAVY_N, cmd: `for i in $(seq 20); do curl -s -m 2 http://${target}/ >/dev/null; done; true` }
}
if (process.env.WORK) {
  const keep = process.env.WORK.split(',')
  for (const w of Object.keys(work)) if (!keep.includes(w.split(' ')[0])) delete work[w]
}
const ms = {}
let streamed = 0
try {
  for (const m of modes) {
    m.sbx = await Sandbox.create('base', opts(m.url))
    await m.sbx.commands.run('true')
    if (m.floor) {
      await m.sbx.files.write('/tmp/floor.py', floorWatcher)
      await m.sbx.commands.run('python3 /tmp/floor.py', { background: true })
      await new Promise((resolve) => setTimeout(resolve, 1000))
    }
    if (m.listen !== undefined) {
      m.ctl = new AbortController()
      const res = await fetch(`${m.url}/sandboxes/${m.sbx.sandboxId}/activity${m.listen}`, {
        headers: { 'X-API-Key': key, Accept: 'text/event-stream' }, signal: m.ctl.signal
      })
      if (res.status !== 200) throw new Error(`SSE: ${res.status}`)
      m.reading = (async () => {
        try {
          for await (const chunk of res.body) streamed += chunk.length
        } catch {}
      })()
      await new Promise((resolve) => setTimeout(resolve, 1000))
    }
  }
  for (let r = 0; r < ROUNDS; r++) {
    for (const [w, { n, cmd }] of Object.entries(work)) {
      for (const m of modes) {
        for (let i = 0; i < n; i++) {
          const t0 = performance.now()
          await m.sbx.commands.run(cmd, { timeoutMs: 120_000 })
          ;((ms[w] ??= {})[m.name] ??= []).push(performance.now() - t0)
        }
      }
    }
  }
  const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] }
  console.log(`activity feed overhead, ${ROUNDS} rounds interleaved; ${(streamed / 1024).toFixed(0)} KiB streamed to the listener`)
  console.log('workload'.padEnd(20), 'mode'.padEnd(9), 'n'.padStart(4), 'p50 ms'.padStart(9), 'p99 ms'.padStart(9), 'p50/off'.padStart(8), 'p99/off'.padStart(8))
  for (const [w, byMode] of Object.entries(ms)) {
    const off = byMode.off
    for (const m of modes) {
      const xs = byMode[m.name]
      console.log(w.padEnd(20), m.name.padEnd(9), String(xs.length).padStart(4), pct(xs, 50).toFixed(1).padStart(9), pct(xs, 99).toFixed(1).padStart(9),
        (pct(xs, 50) / pct(off, 50)).toFixed(3).padStart(8), (pct(xs, 99) / pct(off, 99)).toFixed(3).padStart(8))
    }
  }
} finally {
  for (const m of modes) {
    m.ctl?.abort()
    await m.reading
    await m.sbx?.kill().catch(() => {})
  }
}
