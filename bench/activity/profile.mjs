#!/usr/bin/env node
// Where a file-heavy run's extra cost goes when one client listens to the
// activity feed (issue 28), on the feed-on daemon: one sandbox, N files
// runs back to back (as activity.mjs runs them) per phase, phases
// alternating between nobody listening and one SSE client taking every
// entry (PHASES). Per phase: the wall p50, the CPU of each host process
// involved (the daemon, the sandbox's runsc processes by name, this node
// process: utime+stime from /proc; the sandbox's cgroup), the bytes the
// sandbox's namespace sent (the agent's stream to the daemon and the
// commands' output), and what the SSE client got (entries, bytes, per
// second). With PERF_DIR set, each phase also runs `perf record -g` on
// those processes into PERF_DIR/<i>-<phase>.data.
//
// Environment: ON_URL, API_KEY, DPID (the daemon's pid), NET_PREFIX (the
// daemon's --net-prefix: the sandbox's namespace is <prefix>-<id>),
// PROF_N (20 runs a phase), PHASES (nolisten,listen,nolisten,listen),
// PERF_DIR (unset), CGROUP_ROOT
// (/sys/fs/cgroup/unified/airlock).
import { readFileSync, readdirSync } from 'node:fs'
import { execFileSync, spawn } from 'node:child_process'
import { loadSDK } from '../sdk.mjs'

const { Sandbox } = await loadSDK('e2b')
const url = process.env.ON_URL
const key = process.env.API_KEY
const N = Number(process.env.PROF_N || 20)
const root = process.env.CGROUP_ROOT || '/sys/fs/cgroup/unified/airlock'
const cmd = 'mkdir -p /home/user/w && cd /home/user/w && for i in $(seq 200); do echo x > f$i; echo y >> f$i; done; cd / && rm -rf /home/user/w'

const ticks = (pid) => { // ms of utime+stime (USER_HZ 100)
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
    return (Number(f[11]) + Number(f[12])) * 10
  } catch { return 0 }
}
const comm = (pid) => { try { return readFileSync(`/proc/${pid}/comm`, 'utf8').trim() } catch { return '?' } }
// pids: the host processes that matter, by label.
const pids = (id) => {
  const out = { daemon: [Number(process.env.DPID)], node: [process.pid] }
  let procs = []
  try { procs = readFileSync(`${root}/${id}/cgroup.procs`, 'utf8').split('\n').filter(Boolean).map(Number) } catch {}
  // runsc's gofer and sandbox processes may sit outside the cgroup: find
  // every process whose command line names the sandbox id.
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue
    try { if (readFileSync(`/proc/${d}/cmdline`, 'utf8').includes(id)) procs.push(Number(d)) } catch {}
  }
  for (const p of new Set(procs)) (out[`runsc:${comm(p)}`] ??= []).push(p)
  return out
}
const cpu = (ps) => Object.fromEntries(Object.entries(ps).map(([k, v]) => [k, v.reduce((s, p) => s + ticks(p), 0)]))
const cg = (id) => { try { return Number(readFileSync(`${root}/${id}/cpu.stat`, 'utf8').match(/usage_usec (\d+)/)[1]) / 1000 } catch { return 0 } }
const netOut = (id) => { // bytes sent by the sandbox's namespace (all but lo)
  const dev = execFileSync('ip', ['netns', 'exec', `${process.env.NET_PREFIX}-${id}`, 'cat', '/proc/net/dev'], { encoding: 'utf8' })
  let rx = 0
  for (const line of dev.split('\n').slice(2)) {
    const [name, rest] = line.split(':')
    if (!rest || name.trim() === 'lo') continue
    rx += Number(rest.trim().split(/\s+/)[8]) // what the sentry sends out of the namespace
  }
  return rx
}

const sbx = await Sandbox.create('base', { apiKey: key, apiUrl: url, sandboxUrl: url, timeoutMs: 600_000 })
const id = sbx.sandboxId
// Phases alternate (the host's filesystem gets slower to create files as
// recently deleted inodes pile up: a fixed order would bias the second).
const phases = (process.env.PHASES || 'nolisten,listen,nolisten,listen').split(',').map((name, i) => ({ name, tag: `${i}-${name}`, listen: name === 'listen' }))
try {
  await sbx.commands.run('true')
  for (const ph of phases) {
    let ctl, reading
    const got = { bytes: 0, entries: 0, file: 0 }
    if (ph.listen) {
      ctl = new AbortController()
      const res = await fetch(`${url}/sandboxes/${id}/activity?since=${Number.MAX_SAFE_INTEGER}`, { headers: { 'X-API-Key': key, Accept: 'text/event-stream' }, signal: ctl.signal })
      reading = (async () => {
        const dec = new TextDecoder()
        try {
          for await (const chunk of res.body) {
            got.bytes += chunk.length
            const s = dec.decode(chunk, { stream: true })
            got.entries += s.split('\nid: ').length - 1 + (s.startsWith('id: ') ? 1 : 0)
            got.file += s.split('"type":"file.').length - 1
          }
        } catch {}
      })()
    }
    await new Promise((resolve) => setTimeout(resolve, 1500)) // the watch starts
    await sbx.commands.run('true')
    const ps = pids(id)
    let perf
    if (process.env.PERF_DIR) {
      const all = Object.values(ps).flat().join(',')
      perf = spawn('perf', ['record', '-g', '-F', '999', '-p', all, '-o', `${process.env.PERF_DIR}/${ph.tag}.data`], { stdio: 'ignore' })
      await new Promise((resolve) => setTimeout(resolve, 1000))
    }
    const c0 = cpu(ps); const g0 = cg(id); const n0 = netOut(id); const b0 = { ...got }; const t0 = performance.now()
    const wall = []
    for (let i = 0; i < N; i++) {
      const s = performance.now()
      await sbx.commands.run(cmd, { timeoutMs: 120_000 })
      wall.push(performance.now() - s)
    }
    await new Promise((resolve) => setTimeout(resolve, 300)) // the feed's tail
    const secs = (performance.now() - t0) / 1000
    const c1 = cpu(ps); const g1 = cg(id); const n1 = netOut(id)
    if (perf) { perf.kill('SIGINT'); await new Promise((resolve) => perf.on('exit', resolve)) }
    wall.sort((a, b) => a - b)
    console.log(`${ph.name}: ${N} runs, wall p50 ${wall[Math.floor(N / 2)].toFixed(1)} ms, p90 ${wall[Math.floor(N * 0.9)].toFixed(1)} ms, ${secs.toFixed(1)} s`)
    console.log(`  CPU ms per run: sandbox cgroup ${((g1 - g0) / N).toFixed(1)}; ` +
      Object.keys(c1).map((k) => `${k} ${((c1[k] - c0[k]) / N).toFixed(1)}`).join('; '))
    console.log(`  sandbox bytes out per run ${((n1 - n0) / N / 1024).toFixed(1)} KiB (${((n1 - n0) / secs / 1024).toFixed(1)} KiB/s)`)
    if (ph.listen) {
      const e = got.entries - b0.entries; const f = got.file - b0.file; const b = got.bytes - b0.bytes
      console.log(`  SSE: ${(e / N).toFixed(1)} entries per run (${(f / N).toFixed(1)} file), ${(b / N / 1024).toFixed(1)} KiB per run; ${(e / secs).toFixed(0)} entries/s, ${(b / secs / 1024).toFixed(1)} KiB/s`)
    }
    ctl?.abort()
    await reading
  }
} finally {
  await sbx.kill().catch(() => {})
}
