process.env.E2B_VOLUME_API_URL ??= process.env.E2B_API_URL
const { Sandbox, Volume } = await import('e2b')
const cmd = process.argv[2]
if (cmd === 'create') {
  const v = await Volume.create('dbg-' + Date.now())
  await v.writeFile('/from-api.txt', 'hello')
  const s = await Sandbox.create({ volumeMounts: { '/mnt/v': v }, timeoutMs: 1800_000 })
  console.log(s.sandboxId, v.volumeId)
} else if (cmd === 'run') {
  const s = await Sandbox.connect(process.argv[3])
  try {
    const r = await s.commands.run(process.argv[4], { user: process.argv[5] || 'user', timeoutMs: 120_000 })
    console.log(r.stdout, r.stderr)
  } catch (e) { console.log('ERR', e.exitCode, e.stdout, e.stderr) }
}
