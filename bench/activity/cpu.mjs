#!/usr/bin/env node
// CPU per file-heavy run by component (issue 28), on the feed-on daemon:
// the sandbox's cgroup (usage_usec: sentry, gofer, the agent and the
// workload), the daemon (utime+stime) and this node process, in three
// sandboxes interleaved: nolisten, listen (one SSE client taking every
// entry: the agent's file watch on) and floor (a process in the sandbox
// holding the same inotify watches, reading them 20 ms apart, sending
// nothing).
//
// Environment: ON_URL, API_KEY, DPID (the daemon's pid), CPU_N (10 runs
// each), CGROUP_ROOT (/sys/fs/cgroup/unified/airlock: where the sandboxes'
// cgroups are, one directory per sandbox id).
import { readFileSync } from 'node:fs'
import { loadSDK } from '../sdk.mjs'
import { floorWatcher } from './floor.mjs'

const { Sandbox } = await loadSDK('e2b')
const url = process.env.ON_URL
const key = process.env.API_KEY
const N = Number(process.env.CPU_N || 10)
const root = process.env.CGROUP_ROOT || '/sys/fs/cgroup/unified/airlock'
const cg = (id) => Number(readFileSync(`${root}/${id}/cpu.stat`, 'utf8').match(/usage_usec (\d+)/)[1])
const daemonCPU = () => { // µs
  const f = readFileSync(`/proc/${process.env.DPID}/stat`, 'utf8').split(') ')[1].split(' ')
  return (Number(f[11]) + Number(f[12])) * 1e6 / 100
}
const cmd = 'mkdir -p /home/user/w && cd /home/user/w && for i in $(seq 200); do echo x > f$i; echo y >> f$i; done; cd / && rm -rf /home/user/w'
const modes = [{ name: 'nolisten' }, { name: 'listen', listen: true }, { name: 'floor', floor: true }]
try {
  for (const m of modes) {
    m.sbx = await Sandbox.create('base', { apiKey: key, apiUrl: url, sandboxUrl: url, timeoutMs: 600_000 })
    await m.sbx.commands.run('true')
    m.r = { wall: [], sbx: 0, daemon: 0, node: 0 }
    if (m.listen) {
      m.ctl = new AbortController()
      const res = await fetch(`${url}/sandboxes/${m.sbx.sandboxId}/activity`, { headers: { 'X-API-Key': key, Accept: 'text/event-stream' }, signal: m.ctl.signal })
      m.reading = (async () => { try { for await (const _ of res.body); } catch {} })() // eslint-disable-line no-unused-vars
    }
    if (m.floor) {
      await m.sbx.files.write('/tmp/floor.py', floorWatcher)
      await m.sbx.commands.run('python3 /tmp/floor.py', { background: true })
    }
  }
  await new Promise((resolve) => setTimeout(resolve, 1500))
  for (let i = 0; i < N; i++) {
    for (const m of modes) {
      const c0 = cg(m.sbx.sandboxId); const d0 = daemonCPU(); const n0 = process.cpuUsage(); const t0 = performance.now()
      await m.sbx.commands.run(cmd, { timeoutMs: 120_000 })
      m.r.wall.push(performance.now() - t0)
      await new Promise((resolve) => setTimeout(resolve, 300)) // the feed's tail
      const n1 = process.cpuUsage(n0)
      m.r.sbx += cg(m.sbx.sandboxId) - c0
      m.r.daemon += daemonCPU() - d0
      m.r.node += n1.user + n1.system
    }
  }
  console.log(`CPU per files run (200 writes), ${N} runs each, interleaved`)
  console.log('mode'.padEnd(9), 'wall p50 ms'.padStart(12), 'sandbox ms'.padStart(11), 'daemon ms'.padStart(10), 'node ms'.padStart(8))
  for (const m of modes) {
    const w = [...m.r.wall].sort((a, b) => a - b)
    console.log(m.name.padEnd(9), w[Math.floor(w.length / 2)].toFixed(1).padStart(12), (m.r.sbx / N / 1000).toFixed(1).padStart(11),
      (m.r.daemon / N / 1000).toFixed(1).padStart(10), (m.r.node / N / 1000).toFixed(1).padStart(8))
  }
} finally {
  for (const m of modes) {
    m.ctl?.abort()
    await m.reading
    await m.sbx?.kill().catch(() => {})
  }
}
